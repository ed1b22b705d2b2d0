"""The detached supervisor used by ``ctmon attach``.

``attach`` starts this in a new session (no controlling terminal), so a
closed terminal, a dropped SSH connection or a killed viewer cannot reach the
job: the supervisor keeps recording until the job ends. The viewer connects
to the supervisor's socket like any later ``ctmon watch`` would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

from ctmon.launch import runtime
from ctmon.launch.spec import JobSpec
from ctmon.launch.supervisor import Supervisor, SupervisorError, SupervisorOptions

_CTMON_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START_TIMEOUT_S = 20.0


class DaemonError(Exception):
    pass


@dataclass
class Detached:
    session_id: str
    session_dir: str
    viewer_path: str
    recording: str
    output_log: str
    proc: subprocess.Popen[bytes]


def start_detached(
    spec: JobSpec, recording: str | None, pty_size: tuple[int, int] = (40, 120), metrics: str | None = None
) -> Detached:
    sid = runtime.new_session_id(spec.target)
    rec = recording or runtime.default_recording(sid)
    outlog = runtime.output_log_path(rec)
    sdir = runtime.session_dir(sid)
    cfg = {
        "spec": asdict(spec),
        "recording": os.path.abspath(rec),
        "output_log": os.path.abspath(outlog),
        "session_id": sid,
        "session_dir": sdir,
        "pty_size": list(pty_size),
        "new_files": recording is None,
        "metrics": metrics,  # "[HOST:]PORT" of a Prometheus endpoint, bound before the job starts
    }
    cfg_path = os.path.join(sdir, "launch.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    log_path = os.path.join(sdir, "supervisor.log")
    code = f"import sys;sys.path.insert(0,{_CTMON_PARENT!r});from ctmon.launch.daemon import main;main()"
    # Kept open: a supervisor that fails removes its session directory, log
    # included, and its last line is the error to show.
    with open(log_path, "w+b") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, cfg_path],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            close_fds=True,
            start_new_session=True,
            cwd=spec.cwd,
        )
        viewer = os.path.join(sdir, "viewer.sock")
        deadline = time.monotonic() + START_TIMEOUT_S
        while not os.path.exists(viewer):
            if proc.poll() is not None:
                raise DaemonError(runtime.last_line(log) or f"the supervisor exited with status {proc.returncode}")
            if time.monotonic() > deadline:
                raise DaemonError("the supervisor did not start in time")
            time.sleep(0.01)
    return Detached(sid, sdir, viewer, os.path.abspath(rec), os.path.abspath(outlog), proc)


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    spec = JobSpec(**cfg["spec"])
    opts = SupervisorOptions(
        recording=cfg["recording"],
        session_dir=cfg["session_dir"],
        session_id=cfg["session_id"],
        mode="attach",
        output_log=cfg["output_log"],
        pty_size=tuple(cfg.get("pty_size") or (40, 120)),
        new_files=bool(cfg.get("new_files")),
        metrics=cfg.get("metrics"),
    )
    try:
        Supervisor(spec, opts).run()
    except SupervisorError as e:
        sys.stderr.write(f"{e}\n")  # the viewer shows this last line as the error
        raise SystemExit(2) from None
    finally:
        # The recording and output log live elsewhere; the sockets are gone.
        shutil.rmtree(cfg["session_dir"], ignore_errors=True)


if __name__ == "__main__":
    main()
