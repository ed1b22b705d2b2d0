"""The directory the supervisor prepends to the job's PYTHONPATH.

Its ``sitecustomize`` loads the agent into the job before any user code runs,
so the job itself is started as plain ``python SCRIPT`` / ``python -m MODULE``.
"""
