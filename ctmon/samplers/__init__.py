"""System samplers, run by the supervisor (never inside the job) at ~1 Hz.

A missing GPU, a missing NVML or an NVML error is a normal, labelled state:
a sampler never raises and never stops the others.
"""
