"""The supervisor of a job ctmon did not start (``ctmon.install()``).

``ctmon.install()`` (ctmon/_install.py) writes a launch file into a new
session directory and runs :func:`main` in a fresh interpreter, which
detaches at once (the caller waits only for that) and supervises the calling
process: it records what the process's agent sends, samples it, serves
viewers, and lists the session for ``ctmon watch`` -- like a job started by
``ctmon record``, minus its output and exit status, which are not ctmon's.
"""

from __future__ import annotations

import json
import os
import shutil
import sys


def main() -> None:
    cfg_path = sys.argv[1]
    if os.fork() > 0:
        os._exit(0)  # the job waits for this; the supervisor goes on, no one's child to reap
    from ctmon.launch.spec import JobSpec
    from ctmon.launch.supervisor import Supervisor, SupervisorError, SupervisorOptions

    with open(cfg_path) as f:
        cfg = json.load(f)
    opts = SupervisorOptions(
        recording=cfg["recording"],
        session_dir=cfg["session_dir"],
        session_id=cfg["session_id"],
        mode="record",
        adopt_pid=int(cfg["pid"]),
        new_files=bool(cfg.get("new_files")),
    )
    try:
        Supervisor(JobSpec(**cfg["spec"]), opts).run()
    except SupervisorError as e:
        sys.stderr.write(f"{e}\n")  # the caller shows this last line as the error
        raise SystemExit(2) from None
    finally:
        shutil.rmtree(cfg["session_dir"], ignore_errors=True)


if __name__ == "__main__":
    main()
