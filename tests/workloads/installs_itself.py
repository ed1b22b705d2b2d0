"""A job ctmon did not start: it calls ctmon.install() itself (unless
--env, where CTMON_INSTALL=1 makes ``import ctmon`` do it), compiles, and
waits until the file named by --hold exists before it ends."""
import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--recording")
parser.add_argument("--hold")
parser.add_argument("--env", action="store_true")
args = parser.parse_args()

import ctmon

rec = None if args.env else ctmon.install(args.recording)
print(f"install returned {rec}", flush=True)
again = ctmon.install(args.recording)
print(f"again {again == rec}", flush=True)

import torch

f = torch.compile(lambda t: t * 2 + 1, backend="eager")
for i in range(4):
    f(torch.ones(3 + (i >= 2)))  # a recompile at the third call
    ctmon.step()
print("compiled", flush=True)
deadline = time.monotonic() + 60
while args.hold and not os.path.exists(args.hold) and time.monotonic() < deadline:
    time.sleep(0.05)
print("done", flush=True)
