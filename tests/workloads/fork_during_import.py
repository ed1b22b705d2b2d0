"""The job forks while ctmon's sender thread is inside an import.

The sender imports a module at times (the torch event's, once). Python's
per-module import lock, held by that thread at the fork, would stay held in
the child, where no thread is left to release it: the child's own import of
the module would hang for good. The agent runs here without a monitor (no
socket): its sender thread runs a record that imports ``slow_module`` (in
argv[1], its body signals and sleeps); the script forks during that import,
and the child imports the same module. Prints ``child ok`` or ``child hung``.
"""

import builtins
import os
import signal
import sys
import threading
import time

from ctmon.agent.core import Agent

sys.path.insert(0, sys.argv[1])
with open(os.path.join(sys.argv[1], "slow_module.py"), "w") as f:
    f.write("import builtins, time\nbuiltins.ctmon_import_started.set()\ntime.sleep(0.4)\n")

builtins.ctmon_import_started = threading.Event()  # type: ignore[attr-defined]
agent = Agent(None)
agent.channel.start()
agent.watch_forks()
agent.channel.put(("call", lambda: [] if __import__("slow_module") else []), True)
assert builtins.ctmon_import_started.wait(30), "the sender thread never imported the module"  # type: ignore[attr-defined]

pid = os.fork()
if pid == 0:
    import slow_module  # noqa: F401 - hangs where the import lock stayed held

    os._exit(0)
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    done, _ = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child ok", flush=True)
        sys.exit(0)
    time.sleep(0.05)
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
print("child hung", flush=True)
sys.exit(1)
