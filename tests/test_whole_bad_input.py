"""Bad input (issue 6): every wrong use gets a one-line ``ctmon: ...`` error
and a non-zero exit (2 for usage, as documented in ctmon/cli/__init__.py),
never a traceback; a job's own failure is shown as Python shows it; broken
environments (no GPU, NVML failing, odd output) never break the job.

docs/RELIABILITY.md lists these cases.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest
from helpers import ROOT, WORKLOADS, ctmon, env_with, one_line_containing

from ctmon.read.output_log import output_bytes
from ctmon.wire.decode import Decoder
from ctmon.wire.events import Output

PY = sys.executable
JOB = os.path.join(WORKLOADS, "faults_job.py")
FAKES = os.path.join(ROOT, "tests", "fakes")
NOBODY = 65534


def one_line_error(out: subprocess.CompletedProcess[str], message: str, code: int = 2) -> None:
    """Exit ``code``, exactly one line on stderr: ``message``; no traceback."""
    assert "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines() == [message], out.stderr
    assert out.returncode == code, (out.returncode, out.stderr)


@pytest.fixture
def shared_dir():  # type: ignore[no-untyped-def]
    """A directory other users can enter (tmp_path is private to root)."""
    d = tempfile.mkdtemp(prefix="ctbad-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _nobody_cmd() -> list[str]:
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", PY]


_NOBODY_CAN_IMPORT: dict[str, bool] = {}


def as_nobody(
    *args: str, env: dict[str, str] | None = None, cwd: str = "/", needs_torch: bool = False
) -> subprocess.CompletedProcess[str]:
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("as root, every file is readable and writable: another user (setpriv, as root) is needed")
    # The other user runs this same interpreter; if the virtual environment or
    # the checkout (an editable install) sits under a private directory
    # (mktemp -d is 0700) it cannot import them, and ctmon rightly stops at
    # that instead of the check under test. .ci/run opens its venv's directory
    # for this reason.
    what = "torch, ctmon" if needs_torch else "ctmon"
    if what not in _NOBODY_CAN_IMPORT:
        probe = subprocess.run(
            [*_nobody_cmd(), "-c", f"import {what}"], cwd="/", capture_output=True, text=True, timeout=120
        )
        _NOBODY_CAN_IMPORT[what] = probe.returncode == 0
    if not _NOBODY_CAN_IMPORT[what]:
        pytest.skip(
            f"user {NOBODY} cannot import {what} with {PY}: the environment or checkout is not readable by others"
        )
    rt = tempfile.mkdtemp(prefix="ctbad-rt-")
    os.chown(rt, NOBODY, NOBODY)
    e = {**(env or env_with()), "CTMON_RUNTIME_DIR": rt, "XDG_STATE_HOME": "/nonexistent"}
    try:
        return subprocess.run(
            [*_nobody_cmd(), "-m", "ctmon", *args], env=e, cwd=cwd, capture_output=True, text=True, timeout=60
        )
    finally:
        shutil.rmtree(rt, ignore_errors=True)


def marker_script(d: str) -> tuple[str, str]:
    """A script that leaves a file behind if it ever runs."""
    marker = os.path.join(d, "it-ran")
    script = os.path.join(d, "job.py")
    with open(script, "w") as f:
        f.write(f"open({marker!r}, 'w').close()\n")
    os.chmod(script, 0o644)
    return script, marker


# ------------------------------------------------------ what to run


@pytest.mark.parametrize("cmd", ["record", "attach"])
def test_missing_script(cmd) -> None:  # type: ignore[no-untyped-def]
    one_line_error(ctmon(cmd, "no_such_script.py"), "ctmon: can't open file 'no_such_script.py': no such file")


def test_unreadable_script(shared_dir) -> None:  # type: ignore[no-untyped-def]
    script, marker = marker_script(shared_dir)
    os.chmod(script, 0o600)  # root's; not for nobody
    out = as_nobody("record", script)
    one_line_error(out, f"ctmon: can't open file '{script}': permission denied")
    assert not os.path.exists(marker)


def test_directory_without_main(tmp_path) -> None:  # type: ignore[no-untyped-def]
    one_line_error(ctmon("record", str(tmp_path)), f"ctmon: '{tmp_path}' is a directory without a __main__.py")


def test_directory_with_main_runs_like_python(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "__main__.py").write_text("import sys\nprint('main of', sys.argv[0])\nsys.exit(5)\n")
    plain = subprocess.run([PY, str(tmp_path)], capture_output=True, text=True)
    out = ctmon("record", "-q", "-o", str(tmp_path / "r.jsonl"), str(tmp_path))
    assert out.returncode == plain.returncode == 5
    assert out.stdout == plain.stdout and "Traceback" not in out.stderr


def test_syntax_error_is_shown_like_python(tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "broken.py"
    script.write_text("x = 1\nif x ==\n    print(x)\n")
    plain = subprocess.run([PY, str(script)], capture_output=True, text=True)
    out = ctmon("record", "-o", str(tmp_path / "r.jsonl"), str(script))
    assert out.returncode == plain.returncode == 1
    assert plain.stderr.startswith("  File ") and "SyntaxError: invalid syntax" in plain.stderr
    assert out.stderr.startswith(plain.stderr), out.stderr  # python's own lines, first, unchanged
    assert "ctmon/" not in out.stderr.split("SyntaxError")[0] and "Traceback" not in out.stderr


def test_unknown_module() -> None:
    one_line_error(
        ctmon("record", "-m", "no_such_module_for_ctmon"), "ctmon: no module named 'no_such_module_for_ctmon'"
    )


def test_not_a_module_name() -> None:
    one_line_error(ctmon("record", "-m", "3d.model"), "ctmon: '3d.model' is not a module name")


# ------------------------------------------------------------- flags


@pytest.mark.parametrize(
    "argv, message",
    [
        (["record", "--frobnicate", "x.py"], "ctmon: record: unknown option --frobnicate (try: ctmon record --help)"),
        (["attach", "--frobnicate", "x.py"], "ctmon: attach: unknown option --frobnicate (try: ctmon attach --help)"),
        (["record", "-o"], "ctmon: record: -o needs a value"),
        (["record", "--quiet=yes", JOB], "ctmon: record: --quiet takes no value"),
        (["record", "-m"], "ctmon: record: -m needs a module name"),
        (["record"], "ctmon: record: a script or -m MODULE is required (ctmon record [options] SCRIPT [ARGS...])"),
        (["record", "--"], "ctmon: record: a script or -m MODULE is required after --"),
        (
            ["record", "--fail-on", "recompiles>>2", JOB],
            "ctmon: bad --fail-on 'recompiles>>2': expected METRIC OP NUMBER, e.g. 'recompiles>2'",
        ),
        (["record", "--listen", "localhost:http", JOB], "ctmon: bad --listen 'localhost:http': expected [HOST:]PORT"),
        (["record", "--listen", "70000", JOB], "ctmon: bad --listen '70000': expected [HOST:]PORT"),
        (
            ["frobnicate"],
            "ctmon: unknown command 'frobnicate' (commands: attach, record, replay, report, diff, export, watch, bench, runs)",
        ),
    ],
    ids=[
        "unknown option",
        "attach unknown option",
        "missing value",
        "value for a flag",
        "-m without module",
        "no script",
        "nothing after --",
        "--fail-on garbage",
        "--listen garbage",
        "--listen port range",
        "unknown command",
    ],
)
def test_bad_flags(argv, message) -> None:  # type: ignore[no-untyped-def]
    one_line_error(ctmon(*argv), message)


def test_fail_on_unknown_metric() -> None:
    out = ctmon("record", "--fail-on", "bogus>1", JOB)
    one_line_containing(out, "ctmon: bad --fail-on 'bogus>1': unknown metric 'bogus' (metrics: ", "recompiles")


def test_listen_address_in_use_is_refused_before_the_job_starts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    script, marker = marker_script(str(tmp_path))
    earlier = tmp_path / "r.jsonl"
    earlier.write_text('{"kind":"session","t":1.0,"v":1}\n')  # a recording from an earlier run
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = ctmon("record", "-o", str(earlier), "--listen", f"127.0.0.1:{port}", script)
    one_line_containing(out, f"127.0.0.1:{port}", "Address already in use")
    assert not os.path.exists(marker), "the job ran although ctmon could not listen"
    assert earlier.read_text() == '{"kind":"session","t":1.0,"v":1}\n', "the earlier recording was overwritten"


# ------------------------------------------------------ the recording path


def test_output_into_a_directory_that_cannot_be_created(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A missing directory is created (mkdir -p); one under a plain file cannot be."""
    (tmp_path / "a-file").write_text("")
    target = tmp_path / "a-file" / "sub" / "r.jsonl"
    one_line_error(
        ctmon("record", "-o", str(target), JOB),
        f"ctmon: cannot write the recording to '{target}': cannot create {tmp_path / 'a-file' / 'sub'}: "
        "Not a directory",
    )


def test_output_is_a_directory(tmp_path) -> None:  # type: ignore[no-untyped-def]
    one_line_error(
        ctmon("record", "-o", str(tmp_path), JOB),
        f"ctmon: cannot write the recording to '{tmp_path}': it is a directory",
    )


def test_output_is_the_script_itself(tmp_path) -> None:  # type: ignore[no-untyped-def]
    script, marker = marker_script(str(tmp_path))
    one_line_error(
        ctmon("record", "-o", script, script),
        f"ctmon: refusing to write the recording over the script itself ({script})",
    )
    assert not os.path.exists(marker)


@pytest.mark.slow
def test_output_into_an_unwritable_directory_before_the_job_starts(shared_dir) -> None:  # type: ignore[no-untyped-def]
    script, marker = marker_script(shared_dir)
    ro = os.path.join(shared_dir, "ro")
    os.mkdir(ro, 0o755)
    out = as_nobody("record", "-o", os.path.join(ro, "r.jsonl"), script, needs_torch=True)
    one_line_error(
        out, f"ctmon: cannot write the recording to '{os.path.join(ro, 'r.jsonl')}': directory {ro} is not writable"
    )
    assert not os.path.exists(marker)


def test_unusable_state_dir_without_output(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """No -o: the recording goes under $XDG_STATE_HOME; if that cannot be
    created, say so in one line, before the job starts."""
    script, marker = marker_script(str(tmp_path))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = ctmon("record", script, env=env_with(XDG_STATE_HOME=str(blocker / "state")))
    one_line_containing(out, str(blocker))
    assert not os.path.exists(marker)


# ------------------------------------------------------------ torch


def test_torch_missing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A Python without torch (no site-packages at all: ``python -S``)."""
    out = subprocess.run(
        [PY, "-S", "-m", "ctmon", "record", JOB], env=env_with(), cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    one_line_error(
        out,
        f"ctmon: torch is not installed in this Python environment ({PY}); install it there, "
        "or run the ctmon of the environment your job uses",
    )


def test_torch_too_old(tmp_path) -> None:  # type: ignore[no-untyped-def]
    info = tmp_path / "site" / "torch-1.13.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 1.13.0\n")
    env = env_with()
    env["PYTHONPATH"] = str(tmp_path / "site") + os.pathsep + env["PYTHONPATH"]
    one_line_error(ctmon("record", JOB, env=env), "ctmon: torch 1.13.0 is too old: ctmon needs torch 2.5 or newer")


# ------------------------------------------------------------- GPUs


def _samples(rec: str) -> list[dict]:
    with open(rec) as f:
        return [e for e in map(json.loads, f) if e["kind"] == "sample"]


@pytest.mark.parametrize(
    "fake, error",
    [
        ({"CTMON_FAKE_NVML_FAIL": "init"}, "no NVIDIA driver (NVML not found)"),
        ({"CTMON_FAKE_NVML_COUNT": "0"}, "no NVIDIA GPU"),
    ],
    ids=["NVML fails at init", "no GPU"],
)
@pytest.mark.slow
def test_no_gpu(tmp_path, fake, error) -> None:  # type: ignore[no-untyped-def]
    env = env_with(**fake)
    env["PYTHONPATH"] = FAKES + os.pathsep + env["PYTHONPATH"]
    rec = str(tmp_path / "r.jsonl")
    out = ctmon("record", "-o", rec, JOB, "--steps", "20", "--step-ms", "20", env=env)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    samples = _samples(rec)
    assert samples and samples[0].get("gpu_error") == error and not any(s.get("gpus") for s in samples)
    assert ctmon("report", rec).returncode == 0


_LOSING_NVML = '''
"""The test fake NVML, until a file appears: then every call fails, as when a GPU falls off the bus."""
import importlib.util, os, sys
_spec = importlib.util.spec_from_file_location("_fake_nvml", {fake!r})
_fake = sys.modules["_fake_nvml"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fake)
NVMLError = _fake.NVMLError
NVML_TEMPERATURE_GPU = _fake.NVML_TEMPERATURE_GPU
NVML_CLOCK_SM = _fake.NVML_CLOCK_SM

def _wrap(fn):
    def call(*args, **kwargs):
        if os.path.exists({trigger!r}):
            raise NVMLError("GPU is lost")
        return fn(*args, **kwargs)
    return call

for _name in dir(_fake):
    if _name.startswith("nvml"):
        globals()[_name] = _wrap(getattr(_fake, _name))
'''


@pytest.mark.slow
def test_nvml_errors_mid_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Every NVML call starts failing mid-run: samples go on with N/A (None)
    values; the job and the recording are unaffected."""
    fake_dir = tmp_path / "nvml"
    fake_dir.mkdir()
    trigger = tmp_path / "gpu-lost"
    (fake_dir / "pynvml.py").write_text(
        _LOSING_NVML.format(fake=os.path.join(FAKES, "pynvml.py"), trigger=str(trigger))
    )
    env = env_with(CTMON_FAKE_NVML_UTIL="77")
    env["PYTHONPATH"] = str(fake_dir) + os.pathsep + env["PYTHONPATH"]
    rec = str(tmp_path / "r.jsonl")
    gate = tmp_path / "gate"
    p = subprocess.Popen(
        [PY, "-m", "ctmon", "record", "-o", rec, JOB, "--steps", "60", "--step-ms", "50", "--gate", str(gate)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        import time

        deadline = time.monotonic() + 30
        while not (os.path.exists(rec) and any(s.get("gpus") for s in _samples(rec))):
            assert time.monotonic() < deadline, "no GPU sample"
            time.sleep(0.1)
        trigger.write_text("")
        gate.write_text("")
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)  # ctmon and its job
            p.wait(10)
    assert p.returncode == 0 and "Traceback" not in err, err
    gpus = [s["gpus"][0] for s in _samples(rec) if s.get("gpus")]
    assert gpus[0]["util"] == 77
    assert gpus[-1]["util"] is None and gpus[-1]["mem_used"] is None and gpus[-1]["temp_c"] is None, gpus[-1]
    report = json.loads(ctmon("report", rec, "--json").stdout)
    assert report["steps"]["count"] == 60 and report["exit_code"] == 0


# --------------------------------------------------- the job's output


def test_huge_output_line_without_newline(tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "big.py"
    script.write_text("import sys\nsys.stdout.write('y' * (10 << 20))\nsys.stdout.flush()\n")
    rec = str(tmp_path / "r.jsonl")
    out = subprocess.run(
        [PY, "-m", "ctmon", "record", "-q", "-o", rec, str(script)],
        env=env_with(),
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert out.returncode == 0 and b"Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stdout == b"y" * (10 << 20)  # passed through whole
    with open(rec, "rb") as f:
        lines = f.read().splitlines()
    assert max(len(ln) for ln in lines) < 256 << 10  # in chunks, far below the reader's line limit (1 MiB)
    # byte-exact: chunks in the recording, or in the output log its events point into
    assert output_bytes(rec) == {"stdout": b"y" * (10 << 20)}
    assert ctmon("report", rec).returncode == 0


def test_non_utf8_output(tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "bytes.py"
    script.write_text(
        "import sys\nsys.stdout.buffer.write(b'ok \\xff\\xfe\\xc3\\x28 \\xe2\\x82\\n')\n"
        "sys.stderr.buffer.write(b'\\x80err\\n')\n"
    )
    rec = str(tmp_path / "r.jsonl")
    out = subprocess.run(
        [PY, "-m", "ctmon", "record", "-q", "-o", rec, str(script)],
        env=env_with(),
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 0
    assert out.stdout == b"ok \xff\xfe\xc3\x28 \xe2\x82\n"  # the bytes, unchanged
    assert out.stderr == b"\x80err\n"
    with open(rec, "rb") as f:
        events = [e for e in Decoder().decode_all(f.read().splitlines()) if isinstance(e, Output)]
    # recorded byte-exact (the chunk that is not UTF-8 in base64), shown as a terminal would
    assert b"".join(e.raw() or b"" for e in events if e.stream == "stdout") == b"ok \xff\xfe\xc3\x28 \xe2\x82\n"
    assert "".join(e.text() for e in events if e.stream == "stdout") == "ok \ufffd\ufffd\ufffd( \ufffd\n"


# ------------------------------------------------------- recordings


def _truncated(tmp_path) -> str:  # type: ignore[no-untyped-def]
    rec = str(tmp_path / "full.jsonl")
    assert ctmon("record", "-q", "-o", rec, JOB, "--steps", "100", "--print-every", "10").returncode == 0
    with open(rec, "rb") as f:
        data = f.read()
    cut = str(tmp_path / "cut.jsonl")
    with open(cut, "wb") as f:
        f.write(data[: data.rindex(b'{"kind":"exit"') + 10])
    return cut


@pytest.mark.parametrize("cmd", ["report", "replay"])
@pytest.mark.parametrize(
    "content, message",
    [
        pytest.param(None, "ctmon: no such recording: {p}", id="missing"),
        pytest.param(b"", "ctmon: {p} is empty: nothing was recorded", id="empty"),
        pytest.param(b"\n\n  \n", "ctmon: {p} is empty: nothing was recorded", id="blank"),
        pytest.param(
            b"\x00\x01\x02\x03ELF\x00" * 100, "ctmon: {p} is not a ctmon recording (binary data)", id="binary"
        ),
        pytest.param(
            b"epoch 1 loss 0.5\nepoch 2 loss 0.4\n",
            "ctmon: {p} is not a ctmon recording (first line is not a ctmon event)",
            id="text",
        ),
        pytest.param(
            b'[1, 2, 3]\n{"a": 1}\n',
            "ctmon: {p} is not a ctmon recording (first line is not a ctmon event)",
            id="JSON, not events",
        ),
        pytest.param(
            "dir",
            "ctmon: {p} is a directory, not a recording (nor PyTorch's trace: no TORCH_TRACE *.log files in it)",
            id="directory",
        ),
    ],
)
def test_unreadable_recordings(tmp_path, cmd, content, message) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "rec.jsonl"
    if content == "dir":
        p.mkdir()
    elif content is not None:
        p.write_bytes(content)
    one_line_error(ctmon(cmd, str(p)), message.format(p=p))


def test_recording_of_one_huge_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "rec.jsonl"
    p.write_bytes(b"{" + b"x" * (3 << 20))
    one_line_error(ctmon("report", str(p)), f"ctmon: {p} is not a ctmon recording (no events in it)")


def test_recording_not_readable(shared_dir) -> None:  # type: ignore[no-untyped-def]
    p = os.path.join(shared_dir, "rec.jsonl")
    with open(p, "w") as f:
        f.write('{"kind":"session","t":1.0,"v":1}\n')
    os.chmod(p, 0o600)
    one_line_error(as_nobody("report", p), f"ctmon: cannot read {p}: permission denied")


def test_recording_that_is_a_fifo(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A FIFO (or any non-file) must be refused, not waited on forever."""
    p = tmp_path / "rec.jsonl"
    os.mkfifo(p)
    try:
        out = ctmon("report", str(p), timeout=5)
    except subprocess.TimeoutExpired:
        raise AssertionError("ctmon report waits forever on a FIFO") from None
    one_line_containing(out, str(p))


def test_truncated_recording_reports_what_it_has(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cut = _truncated(tmp_path)
    out = ctmon("report", cut, "--json")
    one_line_error(out, "ctmon: the recording ends mid-line (cut off); everything before the cut is shown", code=0)
    report = json.loads(out.stdout)
    # no exit in it and no ctmon writing it: cut off, not running
    assert report["steps"]["count"] == 100 and report["exit_code"] is None and report["state"] == "cut_off"


def test_newer_version_recording(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "new.jsonl"
    p.write_text(
        '{"kind":"session","t":1.0,"v":99,"command":["python","x.py"],"future":{"a":1}}\n'
        '{"kind":"hologram","t":1.5,"x":1}\n'
        '{"kind":"exit","t":2.0,"code":0,"signal":null}\n'
    )
    out = ctmon("report", str(p))
    one_line_error(out, "ctmon: recorded by a newer ctmon (protocol 99); showing what this version understands", code=0)
    assert "python x.py" in out.stdout


# ------------------------------------------------- report / replay / watch


@pytest.mark.parametrize(
    "argv, message",
    [
        (["report"], "ctmon: report: a recording FILE is required (ctmon report FILE)"),
        (["report", "a.jsonl", "--xml"], "ctmon: report: unknown option --xml (try: ctmon report --help)"),
        (["report", "a.jsonl", "b.jsonl"], "ctmon: no such recording: a.jsonl"),
        (["report", "a.jsonl", "--fail-on"], "ctmon: report: --fail-on needs an expression, e.g. 'recompiles>2'"),
        (["replay"], "ctmon: replay: a recording is required (ctmon replay FILE [FILE ...])"),
        (["replay", "a.jsonl", "b.jsonl"], "ctmon: no such recording: a.jsonl"),
        (["watch", "999999"], "ctmon: watch: no live ctmon session for '999999' (ctmon watch --list shows them)"),
        (["watch", "--frob"], "ctmon: watch: unknown option --frob (try: ctmon watch --help)"),
        (["watch", "1", "2"], "ctmon: watch: give at most one PID or session id"),
        (
            ["watch", "--connect", "127.0.0.1:7777"],
            "ctmon: watch: --connect needs the session token (--token-file PATH or CTMON_TOKEN)",
        ),
        (["watch", "--connect"], "ctmon: watch: --connect needs HOST:PORT"),
        (["watch", "--connect", "127.0.0.1:7777", "--token-file"], "ctmon: watch: --token-file needs a PATH"),
        (
            ["watch", "--connect", "127.0.0.1:7777", "--token", "secret"],
            "ctmon: watch: --token is refused: a command line is visible to every local user; "
            "use --token-file PATH (mode 0600), CTMON_TOKEN=..., or type it at the prompt",
        ),
        (
            ["watch", "--connect", "127.0.0.1:7777", "--token-file", "/nonexistent/token"],
            "ctmon: watch: cannot read --token-file /nonexistent/token: No such file or directory",
        ),
    ],
    ids=[
        "report no file",
        "report unknown option",
        "report two files",
        "report --fail-on no expr",
        "replay no file",
        "replay two files",
        "watch unknown pid",
        "watch unknown option",
        "watch two keys",
        "watch no token",
        "watch --connect no value",
        "watch --token-file no value",
        "watch --token refused",
        "watch --token-file missing",
    ],
)
def test_viewer_command_misuse(argv, message) -> None:  # type: ignore[no-untyped-def]
    one_line_error(ctmon(*argv, env=env_with(CTMON_TOKEN="")), message)


def test_report_fail_on_garbage(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rec = _truncated(tmp_path).replace("cut", "full")
    one_line_error(
        ctmon("report", rec, "--fail-on", "steps>"),
        "ctmon: bad --fail-on 'steps>': expected METRIC OP NUMBER, e.g. 'recompiles>2'",
    )


def test_replay_needs_a_terminal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rec = _truncated(tmp_path).replace("cut", "full")
    one_line_error(ctmon("replay", rec), f"ctmon: replay: needs a terminal (for text: ctmon report {rec})")


def test_watch_connect_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        out = ctmon("watch", "--connect", f"127.0.0.1:{port}", env=env_with(CTMON_TOKEN="t"))
    one_line_error(out, f"ctmon: watch: cannot connect to 127.0.0.1:{port}: Connection refused")


def test_watch_connect_bad_address() -> None:
    out = ctmon("watch", "--connect", "nohost", env=env_with(CTMON_TOKEN="t"))
    one_line_containing(out, "'nohost'", "expected [HOST:]PORT")


# ------------------------------------------------- attach in a terminal


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.slow
def test_attach_in_a_terminal_refuses_to_write_over_the_script(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The TUI path of ``ctmon attach`` checks the output path as ``record``
    does: never over the script it is asked to run."""
    from test_whole_faults import PROMPT, Tmux, _tmux_env

    script = tmp_path / "train.py"
    source = "print('training')\n"
    script.write_text(source)
    rt = tempfile.mkdtemp(prefix="ctbad-")
    tm = Tmux(str(tmp_path), _tmux_env(rt))
    try:
        tm.send(f"{PY} -m ctmon attach -o {script} {script}; echo RC=$?")
        screen = tm.wait_for(
            lambda s: ("RC=" in s and s.rstrip().endswith(PROMPT.rstrip())) or "■ exited" in s, 30, "ctmon to answer"
        )
        if "RC=" not in screen:  # the TUI came up and the job ran: leave it
            tm.keys("q")
            screen = tm.wait_for(lambda s: "RC=" in s, 30, "ctmon to return")
    finally:
        tm.kill_server()
        shutil.rmtree(rt, ignore_errors=True)
    assert script.read_text() == source, "the script was overwritten by the recording"
    assert f"ctmon: refusing to write the recording over the script itself ({script})" in screen, screen
    assert "RC=2" in screen and "Traceback" not in screen
