"""``ctmon runs``: the recordings in ctmon's state directory, listed and pruned."""

from __future__ import annotations

import json
import os
import time

from helpers import ctmon, env_with, one_line_containing


def _state(tmp_path):  # type: ignore[no-untyped-def]
    runs = tmp_path / "state" / "ctmon" / "runs"
    runs.mkdir(parents=True, mode=0o700)
    now = time.time()
    for k, (name, code) in enumerate([("new", 0), ("mid", 1), ("old", None)]):
        rec = runs / f"2026-{name}.jsonl"
        lines = [{"kind": "session", "t": 1.0, "command": ["python", f"{name}.py"]}]
        if code is not None:
            lines.append({"kind": "exit", "t": 2.0, "code": code})
        rec.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
        (runs / f"2026-{name}.output.log").write_text("output\n")
        age = [60, 3 * 3600, 10 * 86400][k]
        for p in (rec, runs / f"2026-{name}.output.log"):
            os.utime(p, (now - age, now - age))
    (runs / "notes.txt").write_text("not ctmon's")  # never touched
    return runs, env_with(XDG_STATE_HOME=str(tmp_path / "state"))


def test_runs_are_listed_newest_first_with_their_status(tmp_path):
    runs, env = _state(tmp_path)
    out = ctmon("runs", "--json", env=env)
    rows = json.loads(out.stdout)
    assert [os.path.basename(r["path"]) for r in rows] == ["2026-new.jsonl", "2026-mid.jsonl", "2026-old.jsonl"]
    assert [r["exit_code"] for r in rows] == [0, 1, None] and rows[0]["command"] == "python new.py"
    text = ctmon("runs", env=env).stdout
    assert "exit 1" in text and "exit ?" in text and text.strip().endswith(f"in {runs}")


def test_keep_and_older_than_remove_runs_with_their_logs_and_nothing_else(tmp_path):
    runs, env = _state(tmp_path)
    dry = ctmon("runs", "--keep", "1", "--dry-run", env=env)
    assert dry.stdout.count("would remove") == 2 and len(os.listdir(runs)) == 7
    out = ctmon("runs", "--older-than", "1d", env=env)
    assert out.returncode == 0 and out.stdout.strip() == f"removed {runs / '2026-old.jsonl'}"
    assert sorted(os.listdir(runs)) == [
        "2026-mid.jsonl",
        "2026-mid.output.log",
        "2026-new.jsonl",
        "2026-new.output.log",
        "notes.txt",
    ]
    ctmon("runs", "--keep", "1", env=env)
    assert sorted(os.listdir(runs)) == ["2026-new.jsonl", "2026-new.output.log", "notes.txt"]


def test_bad_options_are_one_line(tmp_path):
    _, env = _state(tmp_path)
    one_line_containing(ctmon("runs", "--keep", "x", env=env), "--keep takes a number")
    one_line_containing(ctmon("runs", "--older-than", "3 days", env=env), "--older-than takes an age like")
    one_line_containing(ctmon("runs", "--keep", "1", "--older-than", "1d", env=env), "alternatives")
    one_line_containing(ctmon("runs", "--frob", env=env), "unknown option --frob")
