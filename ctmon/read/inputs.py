"""What one side of a comparison names: one run, read as ``ctmon report``
reads it, or the output directory of ``ctmon bench`` (one recording per
mode and run).

One run is a recording, a TORCH_TRACE directory (or several: one job's
ranks), or the recordings of one job's nodes -- named one by one, or as the
directory that holds them. A directory is told apart by what is in it:
PyTorch's trace logs (``*.log``, never a run's ``X.output.log``) make a
TORCH_TRACE; recordings named as bench names them (``default.jsonl``,
``default-2.jsonl``, ``default-warm.jsonl``) make a bench output; other
recordings are the nodes of one run. Anything else (nothing in it, or two of
these kinds together) is refused in one line: a guess would compare the
wrong things.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ctmon.read.torch_trace import OUTPUT_LOG_SUFFIX
from ctmon.wire.errors import RecordingError
from ctmon.words.modes import MODES

RUN = "run"  # a recording, a TORCH_TRACE, or one job's node recordings
BENCH = "bench"
BENCH_MODES = (*MODES, "try")  # "try": bench --try's run of default with one change
# longest first: "max-autotune-no-cudagraphs-2" is that mode's second run, not max-autotune's
_BENCH_NAME = re.compile(
    r"^(?P<mode>" + "|".join(re.escape(m) for m in sorted(BENCH_MODES, key=len, reverse=True)) + r")"
    r"(?:-(?P<k>\d{1,6})|(?P<warm>-warm))?\.jsonl$"
)


@dataclass
class Input:
    """One side, recognised: ``kind`` RUN (``paths``: what ``load_nodes``
    reads as one run) or BENCH (``modes``: each mode's recordings in the
    order they ran, the first on a fresh compile cache; --warm runs left out)."""

    kind: str
    path: str  # as the user named it: the directory, or the first file
    paths: list[str] = field(default_factory=list)
    modes: dict[str, list[str]] = field(default_factory=dict)


def recognize(paths: list[str]) -> Input:
    """What ``paths`` (one side's, as given) are; a ``RecordingError`` (one
    line) when they are no run nor bench output, or mix kinds. A path that
    does not exist is left for the reader to say so."""
    if len(paths) == 1:
        p = paths[0]
        return _directory(p) if os.path.isdir(p) else Input(RUN, p, [p])
    dirs = [p for p in paths if os.path.isdir(p)]
    if dirs and len(dirs) < len(paths):
        raise RecordingError(
            f"{dirs[0]} is a directory and {next(p for p in paths if p not in dirs)} a file: name the recordings "
            "of one run one by one, or the directory that holds them"
        )
    for d in dirs:  # several directories: one job's TORCH_TRACE directories (its ranks), nothing else
        inner = _directory(d)
        if inner.kind != RUN or inner.paths != [d]:
            raise RecordingError(
                f"{d} is {_what(inner)}: only TORCH_TRACE directories are read together (the ranks of one job)"
            )
    return Input(RUN, paths[0], list(paths))


def _what(inp: Input) -> str:
    if inp.kind == BENCH:
        return "a 'ctmon bench' output"
    return "a directory of recordings"


def _directory(path: str) -> Input:
    try:
        names = sorted(n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n)))
    except OSError as e:
        raise RecordingError(f"cannot read {path}: {e.strerror or e}") from None
    traces = [n for n in names if n.endswith(".log") and not n.endswith(OUTPUT_LOG_SUFFIX)]
    recordings = [n for n in names if n.endswith(".jsonl")]
    if traces and recordings:
        raise RecordingError(
            f"{path} holds both PyTorch trace logs ({traces[0]}) and ctmon recordings ({recordings[0]}): "
            "name the recordings, or move them apart"
        )
    if traces:
        return Input(RUN, path, [path])  # a TORCH_TRACE directory: the trace reader takes it whole
    if not recordings:
        raise RecordingError(f"{path} is empty of runs: no ctmon recording (*.jsonl) nor PyTorch trace (*.log) in it")
    bench = [n for n in recordings if _BENCH_NAME.match(n)]
    others = [n for n in recordings if n not in bench]
    if bench and others:
        raise RecordingError(
            f"{path} mixes 'ctmon bench' runs ({bench[0]}) with other recordings ({others[0]}): "
            "a bench output holds only its runs"
        )
    if others:
        return Input(RUN, path, [os.path.join(path, n) for n in others])  # one run's node recordings
    modes = _bench_modes(path, bench)
    if not modes:
        raise RecordingError(f"{path}: a 'ctmon bench' output with no mode's first run in it (only --warm runs)")
    return Input(BENCH, path, modes=modes)


def _bench_modes(path: str, names: list[str]) -> dict[str, list[str]]:
    """Each mode's runs by their round (``mode.jsonl`` is round 1, ``mode-K``
    round K), in the order bench lists modes; a mode with --warm runs only
    (its first run gone) is left out: nothing cold to compare."""
    rounds: dict[str, dict[int, str]] = {}
    for n in names:
        m = _BENCH_NAME.match(n)
        if m is None or m.group("warm"):
            continue
        rounds.setdefault(m.group("mode"), {})[int(m.group("k") or 1)] = os.path.join(path, n)
    return {mode: [rounds[mode][k] for k in sorted(rounds[mode])] for mode in BENCH_MODES if 1 in rounds.get(mode, {})}
