"""Prints what a script sees (compared with plain python), then echoes stdin."""
import json
import sys

main = sys.modules["__main__"]
print("WHOAMI " + json.dumps({
    "argv": sys.argv,
    "path0": sys.path[0],
    "name": __name__,
    "file": __file__,
    "spec": __spec__,
    "package": __package__,
    "cached": __cached__,
    "loader": type(__loader__).__name__,
    "is_main": main.__dict__ is globals(),
    "globals": sorted(k for k in globals() if k.startswith("__")),
    "stdout_tty": sys.stdout.isatty(),
}))
if len(sys.argv) > 1 and sys.argv[1] == "stdin":
    print("STDIN " + sys.stdin.read().strip())
