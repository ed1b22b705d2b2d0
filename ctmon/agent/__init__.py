"""Code that runs inside the monitored process (entry: site/sitecustomize.py, then boot.py).

Never imports textual, psutil or pynvml; imports torch only when the job does.
"""
