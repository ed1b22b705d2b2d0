"""Code that runs inside the monitored process (see boot.py for the entry).

Never imports textual, psutil or pynvml; imports torch only when the job does.
"""
