"""The job is started as ``python SCRIPT`` / ``python -m MODULE`` itself; the
agent comes in through a sitecustomize on PYTHONPATH. What the job sees is
python's own, byte for byte."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
from helpers import ROOT, env_with, record

SITE = os.path.join(ROOT, "ctmon", "agent", "site", "sitecustomize.py")


def _plain(args: list[str], cwd: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, env=env or env_with(), timeout=120
    )


def _processes(run) -> list[dict]:  # type: ignore[no-untyped-def]
    return [e for e in run.events() if e["kind"] == "process"]


def test_a_traceback_is_byte_identical_to_pythons(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text("def inner(x):\n    return 1 / x\n\ndef outer():\n    inner(0)\n\nouter()\n")
    plain = _plain([str(script)], str(tmp_path))
    run = record(tmp_path, [str(script)], torch_trace=False, options=["-q"], cwd=str(tmp_path))
    assert plain.returncode == run.returncode == 1
    assert run.proc.stderr == plain.stderr
    assert len(_processes(run)) == 1  # the agent did run


def test_the_stack_holds_no_ctmon_frame(tmp_path):
    script = tmp_path / "stack.py"
    script.write_text(
        "import inspect, json\n"
        "def f():\n    return [(fr.filename, fr.function) for fr in inspect.stack()]\n"
        "print('STACK ' + json.dumps(f()))\n"
    )
    plain = _plain([str(script)], str(tmp_path))
    run = record(tmp_path, [str(script)], torch_trace=False, options=["-q"], cwd=str(tmp_path))
    assert run.returncode == 0, run.proc.stderr
    assert run.proc.stdout == plain.stdout
    stack = json.loads(run.proc.stdout.split("STACK ", 1)[1])
    assert stack == [[str(script), "f"], [str(script), "<module>"]]


def _zip_app(path: str, main: str, extra: dict[str, str] | None = None) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("__main__.py", main)
        for name, text in (extra or {}).items():
            z.writestr(name, text)


ZIP_MAIN = (
    "import os, sys\n"
    "os.chdir(os.environ.get('CHDIR_TO', '.'))\n"
    "import helper\n"  # imported after the chdir: sys.path[0] must still find the archive
    "print('ZIP', helper.VALUE, sys.argv[1:])\n"
)


@pytest.mark.slow
def test_zip_apps_run_as_under_python(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("app.zip", "app.py"):  # a zip app named .py is still a zip app to python
        _zip_app(str(tmp_path / name), ZIP_MAIN, {"helper.py": "VALUE = 42\n"})
        env = env_with(CHDIR_TO=str(elsewhere))
        plain = _plain([name, "a"], str(tmp_path), env)
        assert plain.returncode == 0 and "ZIP 42 ['a']" in plain.stdout, plain.stderr
        rec = tmp_path / f"{name}.jsonl"
        run = subprocess.run(
            [sys.executable, "-m", "ctmon", "record", "-q", "-o", str(rec), name, "a"],
            cwd=str(tmp_path),
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout == plain.stdout
        assert run.stderr == plain.stderr


def test_the_users_own_sitecustomize_still_runs(tmp_path):
    user_site = tmp_path / "usersite"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text("import os\nprint('USER SITECUSTOMIZE', os.getpid())\n")
    script = tmp_path / "job.py"
    script.write_text(
        "import os, sys\nprint('JOB', os.getpid())\nprint('PATH_HAS_CTMON_SITE', any(p.endswith(('agent/site', 'agent/site/')) for p in sys.path))\n"
        "print('SITECUSTOMIZE', sys.modules['sitecustomize'].__file__)\n"
    )
    run = record(
        tmp_path,
        [str(script)],
        torch_trace=False,
        options=["-q"],
        extra_env={"PYTHONPATH": ROOT + os.pathsep + str(user_site)},
    )
    assert run.returncode == 0, run.proc.stderr
    job_pid = run.proc.stdout.split("JOB ", 1)[1].split()[0]
    assert run.proc.stdout.count(f"USER SITECUSTOMIZE {job_pid}\n") == 1  # (ctmon's own python runs it too)
    assert "PATH_HAS_CTMON_SITE False" in run.proc.stdout
    assert f"SITECUSTOMIZE {user_site / 'sitecustomize.py'}" in run.proc.stdout
    assert len(_processes(run)) == 1


def test_python_children_of_the_job_are_not_agents(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'print(\"child ran\")'], check=True)\n"
    )
    run = record(tmp_path, [str(script)], torch_trace=False, options=["-q"])
    assert run.returncode == 0, run.proc.stderr
    assert "child ran" in run.proc.stdout
    procs = _processes(run)
    assert len(procs) == 1 and procs[0]["argv"] == [str(script)]


def test_module_mode_names_the_module_in_the_process_event(tmp_path):
    run = record(
        tmp_path,
        ["-m", "whoami_mod", "a"],
        cwd=os.path.join(ROOT, "tests", "workloads"),
        torch_trace=False,
        options=["-q"],
    )
    assert run.returncode == 0, run.proc.stderr
    assert _processes(run)[0]["argv"] == ["-m", "whoami_mod", "a"]


def test_a_broken_hook_is_one_line_and_the_job_runs(tmp_path):
    # A copy of the hook whose ctmon package fails to import.
    fake_root = tmp_path / "fake"
    site = fake_root / "ctmon" / "agent" / "site"
    site.mkdir(parents=True)
    shutil.copy(SITE, site / "sitecustomize.py")
    (fake_root / "ctmon" / "__init__.py").write_text("raise RuntimeError('boom')\n")
    script = tmp_path / "job.py"
    script.write_text("print('job ran')\n")
    env = dict(os.environ, PYTHONPATH=str(site), CTMON_AGENT_SOCKET=str(tmp_path / "nope.sock"))
    env.pop("CTMON_AGENT_PID", None)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0
    assert out.stdout == "job ran\n"
    assert out.stderr == "ctmon: hook disabled (RuntimeError: boom)\n"


def test_the_hook_is_inert_outside_a_monitored_job(tmp_path):
    site = os.path.dirname(SITE)
    script = tmp_path / "job.py"
    script.write_text("import sys\nprint(sorted(m for m in sys.modules if m.startswith('ctmon')))\n")
    env = dict(os.environ, PYTHONPATH=site)
    for var in ("CTMON_AGENT_SOCKET", "CTMON_AGENT_PID"):
        env.pop(var, None)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "[]\n" and out.stderr == ""


def test_importing_sitecustomize_again_starts_no_second_agent(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        "import importlib, sys\nsys.modules.pop('sitecustomize', None)\n"
        "sys.path.insert(0, sys.argv[1])\nimportlib.import_module('sitecustomize')\nprint('ok')\n"
    )
    run = record(tmp_path, [str(script), os.path.dirname(SITE)], torch_trace=False, options=["-q"])
    assert run.returncode == 0, run.proc.stderr
    assert run.proc.stdout == "ok\n"
    assert len(_processes(run)) == 1
