"""Prints what a module run with -m sees (compared with plain python -m)."""
import json
import sys

if __name__ == "__main__":
    main = sys.modules["__main__"]
    print("WHOAMI " + json.dumps({
        "argv": sys.argv,
        "path0": sys.path[0],
        "name": __name__,
        "file": __file__,
        "spec": getattr(main.__spec__, "name", None),
        "package": __package__,
        "is_main": main.__dict__ is globals(),
    }))
