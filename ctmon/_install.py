"""``ctmon.install()``: monitoring for a job ctmon did not start.

A SLURM ``srun`` task, a Kubernetes pod, a notebook: the process calls
``ctmon.install()`` (or runs with ``CTMON_INSTALL=1`` and imports ctmon),
and from then on it is recorded like a job under ``ctmon record`` -- into
the usual state directory or the file given -- and listed by ``ctmon watch``
on its node. Python processes it starts afterwards (``mp.spawn`` ranks,
DataLoader workers) inherit the hook through PYTHONPATH as under ctmon.

It never raises and never stops the job: when monitoring cannot start, one
``ctmon: ...`` line says why and the job runs on unmonitored.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

START_TIMEOUT_S = 15.0
INSTALL_VARS = ("CTMON_INSTALL", "CTMON_RECORDING")
_CTMON_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_installed: str | None = None
_tried = False  # once per process: a failure is said once, not at every call


def install(recording: str | None = None) -> str | None:
    """Start recording this process; returns the recording's path, or None
    when this process is already monitored or monitoring could not start."""
    global _installed, _tried
    if _tried or os.environ.get("CTMON_AGENT_SOCKET"):
        return _installed  # under ctmon already (started by it, or installed before), or it could not be
    _tried = True
    try:
        sdir, sid, rec = _start_supervisor(recording)
    except Exception as e:  # never the job's problem
        sys.stderr.write(f"ctmon: not monitoring this process: {e}\n")
        return None
    from ctmon.launch.spec import job_python_path

    os.environ.update(
        CTMON_AGENT_SOCKET=os.path.join(sdir, "agent.sock"),
        CTMON_SESSION=sid,
        CTMON_SESSION_DIR=sdir,
        CTMON_AGENT_PID=str(os.getpid()),  # this process is the job: its children stay quiet or claim ranks
        PYTHONPATH=job_python_path(os.environ.get("PYTHONPATH")),
    )
    from ctmon.agent.boot import start

    start()
    _installed = rec
    return rec


def _start_supervisor(recording: str | None) -> tuple[str, str, str]:
    from ctmon.launch import runtime

    argv = [a for a in sys.argv if isinstance(a, str)] or ["python"]
    sid = runtime.new_session_id(argv[0] or "python")
    rec = os.path.abspath(recording) if recording else runtime.default_recording(sid)
    sdir = runtime.session_dir(sid)
    cfg = {
        "pid": os.getpid(),
        "spec": {"mode": "command", "target": argv[0] or "python", "args": argv[1:], "cwd": os.getcwd()},
        "recording": rec,
        "session_id": sid,
        "session_dir": sdir,
        "new_files": recording is None,
    }
    cfg_path = os.path.join(sdir, "launch.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    log_path = os.path.join(sdir, "supervisor.log")
    code = f"import sys;sys.path.insert(0,{_CTMON_PARENT!r});from ctmon.launch.adopt import main;main()"
    # the supervisor is ctmon itself: it must not install again at its own import of ctmon
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTMON_AGENT") and k not in INSTALL_VARS}
    with open(log_path, "w+b") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, cfg_path],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            close_fds=True,
            start_new_session=True,
            env=env,
        )
        try:
            proc.wait(timeout=START_TIMEOUT_S)  # it forks and returns at once
        except subprocess.TimeoutExpired:
            proc.kill()
            raise RuntimeError("its supervisor did not start in time") from None
        agent = os.path.join(sdir, "agent.sock")
        deadline = time.monotonic() + START_TIMEOUT_S
        while not os.path.exists(os.path.join(sdir, "viewer.sock")):
            if not os.path.isdir(sdir) or time.monotonic() > deadline:
                raise RuntimeError(runtime.last_line(log) or "its supervisor did not start in time")
            time.sleep(0.01)
        if not os.path.exists(agent):
            raise RuntimeError("its supervisor has no agent socket")
    return sdir, sid, rec
