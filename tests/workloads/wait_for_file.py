"""Prints "ready", then waits (at most 60 s) until the file named in argv[1] exists."""

import os
import sys
import time

print("ready", flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
print("released", flush=True)
