"""``ctmon diff BASE NEW``: what changed between two runs of one job."""

from __future__ import annotations

import gc
import json
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ctmon.cli import CliError
from ctmon.words.textsafe import clean

if TYPE_CHECKING:
    from ctmon.findings.since_base import BaseFacts, NewPlace, SinceBase
    from ctmon.read.inputs import Input
    from ctmon.report.diff_model import BenchDiffDoc, DiffDoc, NotRead, RunSummary, Side, StepBlocks
    from ctmon.report.model import Finding, MarkedFinding, Report
    from ctmon.store import Session

HELP = """usage: ctmon diff BASE NEW [--json | --md] [--fail] [--any-job]
       ctmon diff --base FILE [FILE ...] --new FILE [FILE ...] [options]

Compare two runs of one job. Each side is a recording ('ctmon record'), a
TORCH_TRACE directory, or the recordings of one job's nodes, merged as
'ctmon report a.jsonl b.jsonl' merges them: the directory that holds them,
or --base/--new with each file named. Two 'ctmon bench' outputs (bench -o
DIR) are compared mode by mode: each mode both ran, its runs the noise.
Says what got worse, what got better, and what differs (versions,
settings), most important first: graph breaks and recompiles (with their
reasons), compile time in total and per phase, cache results, steady step
time (p50, p90) and GPU memory peak. Timings are judged against the runs'
own noise: a difference inside it is no regression.

options:
  --base FILE [FILE ...]
              BASE as several recordings (one job's nodes) or TORCH_TRACE directories (its ranks)
  --new FILE [FILE ...]
              NEW, the same way
  --json      print the diff as JSON (schema: docs/DIFF.md)
  --md        print Markdown, fit for a pull-request comment
  --fail      exit 3 when anything regressed (0 when nothing did); bench outputs: in any mode
  --any-job   compare runs of different scripts too
  -h, --help  show this help and exit

exit codes: 0, 3 with --fail when something regressed, 2 on bad input.
"""
USAGE_LINE = "ctmon diff BASE NEW, or ctmon diff --base FILE [FILE ...] --new FILE [FILE ...]"


@dataclass
class DiffArgs:
    fmt: str = "text"
    fail: bool = False
    any_job: bool = False
    base: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args is None:
        sys.stdout.write(HELP)
        return 0
    base, new = recognize_side(args.base, "BASE"), recognize_side(args.new, "NEW")
    from ctmon.cli.report import _write_out
    from ctmon.read.inputs import BENCH

    if base.kind == BENCH or new.kind == BENCH:
        bench = diff_benches(base, new, any_job=args.any_job)
        _write_out(_bench_text(bench, args.fmt))
        return 3 if args.fail and bench["regressions"] else 0
    doc = diff_runs(base, new, any_job=args.any_job)
    _write_out(_doc_text(doc, args.fmt))
    return 3 if args.fail and doc["regressions"] else 0


def parse_args(argv: list[str]) -> DiffArgs | None:
    """The options and both sides' paths (None: --help). Paths follow
    --base or --new up to the next option; without them, BASE and NEW are
    the two paths given."""
    args = DiffArgs()
    loose: list[str] = []
    into = loose
    for a in argv:
        if a in ("-h", "--help"):
            return None
        if a in ("--json", "--md"):
            args.fmt = a[2:]
        elif a == "--fail":
            args.fail = True
        elif a == "--any-job":
            args.any_job = True
        elif a in ("--base", "--new"):
            into = args.base if a == "--base" else args.new
            if into:
                raise CliError(f"diff: {a} is given twice: name all of its files after one {a}")
        elif a.startswith("-") and a != "-":
            raise CliError(f"diff: unknown option {a} (try: ctmon diff --help)")
        else:
            into.append(a)
    if args.base or args.new or "--base" in argv or "--new" in argv:
        if loose:
            raise CliError(f"diff: {loose[0]}: with --base and --new, name each side's files after its option only")
        if not args.base or not args.new:
            raise CliError(f"diff: both sides are needed: {USAGE_LINE}")
        return args
    if len(loose) != 2:
        raise CliError(f"diff: two runs are needed: {USAGE_LINE} (recordings or TORCH_TRACE directories)")
    args.base, args.new = [loose[0]], [loose[1]]
    return args


def _doc_text(doc: DiffDoc, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2, allow_nan=False, default=str) + "\n"
    from ctmon.report.diff_render import render_markdown, render_text

    return render_markdown(doc) if fmt == "md" else render_text(doc)


def _bench_text(doc: BenchDiffDoc, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2, allow_nan=False, default=str) + "\n"
    from ctmon.report.diff_render import render_bench_markdown, render_bench_text

    return render_bench_markdown(doc) if fmt == "md" else render_bench_text(doc)


def recognize_side(paths: list[str], label: str) -> Input:
    """What one side names (ctmon/read/inputs.py); one line, exit 2, when it is no run."""
    from ctmon.read.inputs import recognize
    from ctmon.wire.errors import RecordingError

    try:
        return recognize(paths)
    except RecordingError as e:
        raise CliError(f"diff: {label}: {e}") from None


def load_run(path: str | list[str], label: str) -> RunSummary:
    """One run's summary: a recording, a TORCH_TRACE, or one job's node
    recordings (a directory of them, or each named), merged; one line
    (exit 2) when it cannot be read, or is a bench output."""
    from ctmon.read.inputs import BENCH, recognize
    from ctmon.wire.errors import RecordingError

    try:
        inp = recognize([path] if isinstance(path, str) else path)
    except RecordingError as e:
        raise CliError(f"{label}: {e}") from None
    if inp.kind == BENCH:
        first = next(iter(inp.modes.values()))[0]
        raise CliError(
            f"{label}: {inp.path} is a 'ctmon bench' output (one recording per mode and run), not one run: "
            f"name one of its recordings (e.g. {first}), or compare two bench outputs with ctmon diff"
        )
    return _summary(inp.path, inp.paths, label)


def _summary(path: str, paths: list[str], label: str) -> RunSummary:
    from ctmon.cli.progress import reading
    from ctmon.read.merge import load_nodes
    from ctmon.report.build import build_report
    from ctmon.report.diff import run_summary
    from ctmon.report.gate import capture_lines
    from ctmon.wire.errors import RecordingError

    try:
        session, stats, nodes = load_nodes(paths, reading(path[:80]))
    except RecordingError as e:
        raise CliError(f"{label}: {e}") from None
    except OSError as e:  # a directory or file that went away or cannot be opened
        raise CliError(f"{label}: cannot read {e.filename or path}: {e.strerror or e}") from None
    report = build_report(session, nodes, lean=True)  # the diff reads no findings, steps or system samples
    for w in stats.warnings + capture_lines(report):
        sys.stderr.write(clean(f"ctmon: {label}: {w}\n"))
    summary = run_summary(path, session, report)
    if len(paths) > 1:
        summary["paths"] = list(paths)
    return summary


def diff_runs(base_in: Input, new_in: Input, any_job: bool = False) -> DiffDoc:
    from ctmon.report.diff import compare, same_job

    base = _summary(base_in.path, base_in.paths, "diff: BASE")
    # BASE's store is only garbage now, but it holds reference cycles: freed
    # before NEW is read, the diff's memory peak stays near one report's
    gc.collect()
    new = _summary(new_in.path, new_in.paths, "diff: NEW")
    mismatch = same_job(base, new)
    if mismatch and not any_job:
        raise CliError(f"diff: {mismatch} (--any-job compares them anyway)")
    return compare(base, new)


def diff_paths(base_path: str, new_path: str, any_job: bool = False) -> DiffDoc:
    """``ctmon diff BASE NEW`` of two runs named by one path each."""
    return diff_runs(recognize_side([base_path], "BASE"), recognize_side([new_path], "NEW"), any_job)


# -- two bench outputs


def diff_benches(base_in: Input, new_in: Input, any_job: bool = False) -> BenchDiffDoc:
    """Two ``ctmon bench`` outputs, mode by mode (ctmon/report/diff_bench.py)."""
    from ctmon.read.inputs import BENCH
    from ctmon.report.diff import same_job
    from ctmon.report.diff_bench import compare_benches

    for inp, other, label in ((base_in, new_in, "BASE"), (new_in, base_in, "NEW")):
        if inp.kind != BENCH:
            raise CliError(
                f"diff: {label} ({inp.path}) is one run and {other.path} a 'ctmon bench' output: "
                "compare two bench outputs, or two runs (e.g. one of its recordings)"
            )
    not_read: list[NotRead] = []
    base = _bench_side(base_in, "base", not_read)
    gc.collect()
    new = _bench_side(new_in, "new", not_read)
    for mode in (m for m in base if m in new):
        mismatch = same_job(base[mode], new[mode])
        if mismatch and not any_job:
            raise CliError(f"diff: {mismatch} (--any-job compares them anyway)")
    if not base or not new:
        empty = "BASE" if not base else "NEW"
        raise CliError(f"diff: {empty}: no run of any mode in {(base_in if not base else new_in).path} can be read")
    return compare_benches(base, new, (_bench_side_doc(base_in, base), _bench_side_doc(new_in, new)), not_read)


def _bench_side(inp: Input, side: str, not_read: list[NotRead]) -> dict[str, RunSummary]:
    """Each mode's summary: its first run's, with the step times of all its
    runs. A first run that cannot be read is said (stderr, and ``not_read``)
    and leaves its mode out; a later one is said and left out."""
    from ctmon.report.diff_bench import bench_steps

    label = f"diff: {side.upper()}"
    out: dict[str, RunSummary] = {}
    for mode, runs in inp.modes.items():
        said = f"{label}: {mode}"
        try:
            first = _summary(runs[0], [runs[0]], said)
        except CliError as e:
            sys.stderr.write(clean(f"ctmon: {e}; the mode is not compared\n"))
            not_read.append({"side": side, "mode": mode, "why": str(e).removeprefix(f"{said}: ")})
            continue
        steps = [first["steps"]] + [s for s in (_later_steps(r, said) for r in runs[1:]) if s]
        first["steps"] = bench_steps(first["steps"], steps)
        out[mode] = first
        gc.collect()
    return out


def _later_steps(path: str, label: str) -> StepBlocks | None:
    """A later run's steady step times (nothing else of it is compared)."""
    from ctmon.read.load import load
    from ctmon.report.diff_timing import steady_blocks
    from ctmon.wire.errors import RecordingError

    try:
        session, _ = load(path)
    except (RecordingError, OSError) as e:
        why = e if isinstance(e, RecordingError) else (e.strerror or e)
        sys.stderr.write(clean(f"ctmon: {label}: {os.path.basename(path)} left out: {why}\n"))
        return None
    return steady_blocks(session)


def _bench_side_doc(inp: Input, modes: dict[str, RunSummary]) -> Side:
    first = next(iter(modes.values()))
    return {
        "path": inp.path,
        "input": "bench",
        "command": first.get("command"),
        "session_id": None,
        "modes": list(modes),
    }


REGRESSION = "regression"  # --fail-on regression: the gate of 'ctmon diff --fail', against --baseline


@dataclass
class Baseline:
    """``--baseline BASE``: the earlier run, read, and whether a regression
    since it fails the gate (``--fail-on regression``)."""

    run: RunSummary
    fails: bool
    command: str  # the command's name, for its error lines
    any_job: bool = False  # --any-job: a run of another script is compared all the same

    @property
    def name(self) -> str:
        return os.path.basename(str(self.run["path"]).rstrip("/"))

    def diff(self, path: str, session: Session, report: Report) -> DiffDoc:
        """``ctmon diff BASE path`` of a run already read."""
        from ctmon.report.diff import compare, run_summary, same_job

        new = run_summary(path, session, report)
        mismatch = same_job(self.run, new)
        if mismatch and not self.any_job:
            raise CliError(f"{self.command}: --baseline: {mismatch} (--any-job compares them anyway)")
        return compare(self.run, new)

    def lines(self, doc: DiffDoc) -> list[str]:
        """The stderr lines: one per regression of the diff, naming BASE."""
        # a recompile reason can hold PyTorch's stack trace: its first line is the reason
        return [clean(f"ctmon: regression since {self.name}: {_first_line(e['what'])}") for e in doc["regressions"]]


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].rstrip() + (" (…)" if len(lines) > 1 else "") if lines else ""


def read_baseline(command: str, baseline: str | None, fail_on: list[str], any_job: bool = False) -> Baseline | None:
    """``--baseline BASE`` read and ``--fail-on regression`` checked, before
    anything runs or is printed (a bad baseline: one line, exit 2).
    ``any_job``: a baseline of another script is compared all the same."""
    fails = REGRESSION in fail_on
    if fails and baseline is None:
        raise CliError(f"{command}: --fail-on regression needs --baseline BASE (the run to compare with)")
    if any_job and baseline is None:
        raise CliError(f"{command}: --any-job goes with --baseline BASE (it compares a run of another script)")
    if baseline is None:
        return None
    return Baseline(load_run(baseline, f"{command}: --baseline"), fails, command, any_job)


def live_baseline(command: str, baseline: str | None, any_job: bool, job: list[str] | None) -> Baseline | None:
    """``--baseline BASE`` of a live screen (``attach``, ``replay``), read
    before the job starts or the screen opens: a bad one is one line, exit
    2; a run of another script than ``job`` too, unless ``any_job``."""
    base = read_baseline(command, baseline, [], any_job)
    if base is not None and job is not None and not any_job:
        check_same_job(command, base.run, job)
    return base


def since_base(base: Baseline) -> SinceBase:
    """BASE as the screen compares its findings with it (ctmon/findings/since_base.py)."""
    from ctmon.findings.since_base import SinceBase

    return SinceBase(base_facts(base.run, base.name))


def plain_budgets(fail_on: list[str]) -> list[str]:
    """The ``--fail-on`` expressions that are budgets, not ``regression``."""
    return [b for b in fail_on if b != REGRESSION]


def check_same_job(command: str, base: RunSummary, job: list[str]) -> None:
    """Before a job runs: it must be a run of the baseline's job (unless --any-job)."""
    from ctmon.report.diff import same_job

    mismatch = same_job(base, {"command": job})
    if mismatch:
        raise CliError(f"{command}: --baseline: {mismatch} (--any-job compares them anyway)")


def new_places(doc: DiffDoc) -> list[NewPlace]:
    """The diff's regressions that NEW's findings can be at: break sites,
    limit hits and recompile reasons NEW has and BASE had not."""
    from ctmon.findings.since_base import MARKED_KINDS, RECOMPILE, NewPlace
    from ctmon.report.diff import is_new_since_base

    return [
        NewPlace(
            e["kind"],
            e.get("file"),
            e.get("line"),
            e["what"],
            str(e["new"]) if e["kind"] == RECOMPILE else e.get("reason"),
        )
        for e in doc["regressions"]
        if e["kind"] in MARKED_KINDS and is_new_since_base(e) and e.get("line") is not None
    ]


def with_new_since_base(report: Report, doc: DiffDoc) -> Report:
    """The report with ``new_since_base`` on each finding whose evidence is
    new since BASE (docs/REPORT.md): what is new at its place, as the diff
    says it. Findings with nothing new, and a report without a baseline,
    keep exactly their keys."""
    findings: list[Finding] = []
    for f, said in _marks(report, doc):
        marked: MarkedFinding = {**f, "new_since_base": said}
        findings.append(marked if said else f)
    return {**report, "findings": findings}


def mark_new_findings(report: Report, doc: DiffDoc, base_name: str) -> Report:
    """The report as its text shows it: each finding whose evidence is new
    since BASE says so first in its evidence (``new since BASE: ...``)."""
    findings: list[Finding] = []
    for f, said in _marks(report, doc):
        marked = [f"new since {base_name}: {what}" for what in said]
        findings.append({**f, "evidence": marked + list(f.get("evidence") or [])} if marked else f)
    return {**report, "findings": findings}


def title_new_findings(report: Report, doc: DiffDoc, base_name: str) -> Report:
    """The report as ``record --baseline``'s closing lines say it: each
    finding new since BASE says so after its title, the line it gets there."""
    findings: list[Finding] = []
    for f, said in _marks(report, doc):
        findings.append({**f, "title": f"{f['title']} [new since {base_name}]"} if said else f)
    return {**report, "findings": findings}


def _marks(report: Report, doc: DiffDoc) -> list[tuple[Finding, list[str]]]:
    """Each finding of the report, with what is new since BASE at it."""
    from ctmon.findings.since_base import marks, relative

    news, cwd = new_places(doc), report.get("cwd")
    return [
        (f, marks(relative(f.get("file"), cwd), f.get("line"), f.get("evidence") or [], news))
        for f in report.get("findings") or []
    ]


def base_facts(run: RunSummary, name: str) -> BaseFacts:
    """What of BASE a live run's findings are compared with (ctmon/findings/since_base.py)."""
    from ctmon.findings.since_base import BaseFacts, recompile_reason
    from ctmon.report.diff import relative

    frames = {(relative(f.get("file"), run), f.get("line"), f.get("name")): f for f in run["frames"]}
    return BaseFacts(
        name=name,
        breaks=frozenset((relative(b.get("file"), run), b.get("line"), b.get("reason")) for b in run["graph_breaks"]),
        limit_hits=frozenset(k for k, f in frames.items() if f.get("limit_hit")),
        recompile_reasons={
            k: frozenset(recompile_reason(str(r)) for r in f.get("recompile_reasons") or []) for k, f in frames.items()
        },
    )


def regression_failure(lines: list[str]) -> str:
    """The gate's failure line for ``--fail-on regression``."""
    return f"{len(lines)} regression(s) since the baseline (listed above)"
