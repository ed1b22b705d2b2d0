"""``ctmon bench``: the user's unmodified script, once per mode, each run a
real recording of real torch.compile on the CPU; the table and its JSON."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from helpers import ctmon, one_line_containing

pytestmark = pytest.mark.slow  # every test runs ctmon bench on real torch.compile jobs

TRAIN = textwrap.dedent(
    """
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    f = torch.compile(m)
    for i in range(100000):
        f(torch.randn(16, 32)).sum().backward()
        opt.step()
        opt.zero_grad()
    """
)


def _script(tmp_path, name: str, text: str) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_eager_and_default_are_measured_and_compared(tmp_path):
    """Cold and warm compiles on a fresh cache; each run stopped after its steps."""
    script = _script(tmp_path, "train.py", TRAIN)
    out = ctmon(
        "bench",
        "--modes",
        "eager,default",
        "--steps",
        "60",
        "--warm",
        "--runs",
        "1",
        "--cache-dir",
        str(tmp_path / "cache"),
        "-o",
        str(tmp_path / "runs"),
        "--json",
        script,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    eager, default = doc["modes"]
    assert (eager["mode"], eager["status"], default["mode"], default["status"]) == ("eager", "ok", "default", "ok")
    for row in (eager, default):
        assert row["stopped"] == "steps" and row["steps"] >= 60 and row["p50_ms"] > 0 and row["p90_ms"] >= row["p50_ms"]
        assert row["first_step_s"] > 0 and row["steady_steps"] >= 3
    assert eager["compile_s"] == 0.0 and eager["speedup"] == 1.0 and eager["recompiles"] == 0
    assert default["compile_s"] > 0 and default["speedup"] == round(eager["p50_ms"] / default["p50_ms"], 3)
    assert default["warm_compile_s"] is not None and default["warm_compile_s"] < default["compile_s"]
    assert default["first_step_s"] > eager["first_step_s"]  # it compiled first
    # one run per mode: no interval, so no winner (tests/test_report_bench_verdicts.py has the repeated runs)
    assert doc["recommendation"]["mode"] is None and doc["recommendation"]["resolved"] is False
    assert "one run per mode gives no interval" in doc["recommendation"]["reason"]
    assert sorted(os.listdir(tmp_path / "cache")) == ["default", "eager"]  # a cache of its own per mode
    # each run is a recording of its own: the mode went into the script's torch.compile call
    rec = json.loads(ctmon("report", default["recording"], "--json").stdout)
    assert rec["compile_calls"][0]["mode"] == "default" and rec["compile"]["compiles"] >= 1
    erec = json.loads(ctmon("report", eager["recording"], "--json").stdout)
    assert erec["compile"]["compiles"] == 0 and "force_eager" in erec["notes"][0]["message"]
    assert sorted(os.listdir(tmp_path / "runs")) == [
        "default-warm.jsonl",
        "default-warm.output.log",
        "default.jsonl",
        "default.output.log",
        "eager.jsonl",
        "eager.output.log",
    ]
    # progress on stderr: which mode, compiling or stepping
    assert "[2/2] default: compiling" in out.stderr and "[1/2] eager: stepping" in out.stderr


def test_the_table_and_markdown_say_the_same(tmp_path):
    script = _script(tmp_path, "t.py", TRAIN.replace("torch.compile(m)", 'torch.compile(m, backend="aot_eager")'))
    text = ctmon(
        "bench",
        "--modes",
        "eager,default",
        "--runs",
        "1",
        "--steps",
        "40",
        "-o",
        str(tmp_path / "r"),
        script,
        timeout=300,
    )
    assert text.returncode == 0, text.stderr
    head = text.stdout.splitlines()[0].split()
    assert head[:4] == ["mode", "compile", "1st", "step"] and "speed-up" in head and "host" in head
    # the mode is Inductor's: another backend keeps what it asked for, and the table says so
    assert "default: a torch.compile call with backend=aot_eager keeps it" in text.stdout
    md = ctmon(
        "bench",
        "--modes",
        "eager",
        "--runs",
        "1",
        "--steps",
        "20",
        "--md",
        "-o",
        str(tmp_path / "m"),
        script,
        timeout=300,
    )
    assert md.stdout.startswith("| mode | compile |") and "|---|" in md.stdout


def test_bad_input_gets_a_line_and_the_other_modes_are_still_measured(tmp_path):
    plain = _script(tmp_path, "plain.py", TRAIN.replace("f = torch.compile(m)", "f = m").replace("100000", "30"))
    one_line_containing(ctmon("bench", "--modes", "eager,fast", plain), "unknown mode fast")
    one_line_containing(ctmon("bench", "--steps", "many", plain), "--steps takes a number")
    one_line_containing(ctmon("bench", "--time-limit", "0", plain), "must be above 0")
    one_line_containing(ctmon("bench", "--json", "--md", plain), "alternatives")
    one_line_containing(ctmon("bench", str(tmp_path / "missing.py")), "no such file")
    out = ctmon(
        "bench", "--modes", "eager,default", "--runs", "1", "-o", str(tmp_path / "p"), "--json", plain, timeout=300
    )
    rows = {r["mode"]: r for r in json.loads(out.stdout)["modes"]}
    assert rows["eager"]["status"] == "ok"
    assert rows["default"]["status"] == "no-compile" and "never called torch.compile" in rows["default"]["error"]
    # a mode that fails (as an OOM would): its line says why; eager is still measured
    failing = _script(
        tmp_path,
        "oom.py",
        TRAIN.replace("torch.compile(m)", 'torch.compile(m, backend="aot_eager")').replace(
            "for i in range(100000):",
            "import os\nif os.environ['CTMON_COMPILE_MODE'] == 'default':\n"
            "    raise RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB')\nfor i in range(40):",
        ),
    )
    out = ctmon("bench", "--modes", "default,eager", "--runs", "2", "-o", str(tmp_path / "f"), failing, timeout=300)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("default"))
    assert line.split()[:2] == ["default", "failed"]
    assert "default: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB at " in out.stdout
    assert next(x for x in out.stdout.splitlines() if x.startswith("eager")).split()[1] == "0.0"
    # a mode that failed is not run again; eager's second run still is
    assert (tmp_path / "f" / "eager-2.jsonl").exists() and not (tmp_path / "f" / "default-2.jsonl").exists()


def test_a_run_past_its_time_limit_is_stopped_cleanly_and_said_so(tmp_path):
    """The limit is the run's wall time from its start, start-up included (a
    start-up or compile that never ends must be stopped too). On a loaded
    machine importing torch alone can outlast a short limit, so the runner is
    held (SIGSTOP) from the moment it has started the run until the job says
    it has made its first steps: the limit is then reached with steps made,
    however slow the start. The run is stopped by Ctrl-C (its own exit, not
    a kill) and its figures are the steps it ran, as its recording has them."""
    import signal
    import subprocess
    import sys
    import time

    import psutil  # type: ignore[import-untyped]
    from helpers import ROOT, env_with

    stepped = tmp_path / "stepped"
    slow = _script(
        tmp_path,
        "slow.py",
        TRAIN.replace(
            "opt.zero_grad()",
            f"opt.zero_grad()\n    if i == 5: open({str(stepped)!r}, 'w').close()\n    import time; time.sleep(0.05)",
        ),
    )
    cmd = ["bench", "--modes", "eager", "--runs", "1", "--time-limit", "10", "-o", str(tmp_path / "s"), "--json", slow]
    bench = subprocess.Popen(
        [sys.executable, "-m", "ctmon", *cmd], cwd=ROOT, env=env_with(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    runner = psutil.Process(bench.pid)
    try:
        deadline = time.monotonic() + 60
        while not runner.children() and bench.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # the run has started when the runner has a child: hold the runner there
        assert runner.children(), "ctmon bench did not start the run"
        bench.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 120
        while not stepped.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stepped.exists(), "the job made no steps"
        bench.send_signal(signal.SIGCONT)
        out, err = bench.communicate(timeout=120)
    finally:
        if bench.poll() is None:
            bench.send_signal(signal.SIGCONT)
            bench.kill()
            bench.wait(10)
    assert bench.returncode == 0, err
    (row,) = json.loads(out)["modes"]
    assert (row["status"], row["stopped"]) == ("time-limit", "time-limit"), row
    assert row["steps"] >= 6 and row["p50_ms"] >= 50, row  # six boundaries by the readiness file; 50 ms sleeps
    rec = json.loads(ctmon("report", row["recording"], "--json").stdout)
    assert rec["steps"]["count"] == row["steps"]
    assert rec["exit_signal"] == "SIGINT", rec["exit_signal"]  # Ctrl-C ended it (no SIGTERM, no kill): stopped cleanly


def test_a_run_stopped_before_its_first_step_says_so(tmp_path):
    """What a loaded machine showed: the limit came while the job was still
    starting. No step, no figures, and the line says why and what to do."""
    starting = _script(tmp_path, "starting.py", "import time\ntime.sleep(600)\n" + TRAIN)
    out = ctmon(
        "bench",
        "--modes",
        "eager",
        "--runs",
        "1",
        "--time-limit",
        "1",
        "-o",
        str(tmp_path / "s"),
        starting,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr  # a time-limited run counts as run
    line = next(x for x in out.stdout.splitlines() if x.startswith("eager"))
    assert line.split()[:6] == ["eager", "0.0", "s", "—", "—", "—"], line  # no first step, no p50, no p90
    assert "eager: stopped at the time limit (1 s) before its first step: " in out.stdout, out.stdout
    assert "while compiling" not in out.stdout


def test_stopping_bench_stops_the_run_under_way_and_shows_what_was_measured(tmp_path):
    """The job runs in a process group of its own: a SIGTERM (or Ctrl-C) to
    ctmon bench must reach it, and the modes not yet run are left out."""
    import signal
    import subprocess
    import sys
    import time

    from helpers import ROOT, env_with

    slow = _script(
        tmp_path, "slow2.py", TRAIN.replace("opt.zero_grad()", "opt.zero_grad()\n    import time; time.sleep(0.02)")
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctmon", "bench", "--modes", "eager,default", "-o", str(tmp_path / "i"), slow],
        cwd=ROOT,
        env=env_with(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and b'"steps"' not in _read(tmp_path / "i" / "eager.jsonl"):
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "bench interrupted: 1 of 2 mode(s) run" in err
    assert "eager: interrupted; its figures cover the steps it ran" in out
    assert not any(line.startswith("default") for line in out.splitlines())
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert slow not in ps  # the job is gone with it


def _read(path) -> bytes:  # type: ignore[no-untyped-def]
    try:
        return path.read_bytes()
    except OSError:
        return b""
