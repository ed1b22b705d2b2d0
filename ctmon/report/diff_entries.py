"""``ctmon diff``'s entries: the four lists a comparison fills, in the
order a user acts on them, and the keys that pair one run's frames with
the other's (files relative to each run's working directory: two
checkouts still name one place)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctmon.report.diff_model import DiffEntry, EntryDetails, FrameKey, Located, Verdicts
from ctmon.report.model import Frame
from ctmon.words.locations import where

if TYPE_CHECKING:
    from typing_extensions import Unpack  # Python 3.10 has it only here; in annotations alone

# The order entries are listed in: what a user acts on first.
KIND_ORDER = (
    "limit_hit",
    "graph_break",
    "recompile",
    "frame",
    "frame_compiles",
    "count",
    "compile_time",
    "cache",
    "cache_key",
    "step_time",
    "gpu_memory",
    "version",
    "config",
    "compile_call",
)


class Diff:
    """The four lists, filled as figures are compared."""

    def __init__(self) -> None:
        self.lists: dict[str, list[DiffEntry]] = {
            "regressions": [],
            "improvements": [],
            "changed": [],
            "unchanged": [],
        }

    def add(
        self, verdict: str, kind: str, subject: str, what: str, base: object, new: object, **more: Unpack[EntryDetails]
    ) -> None:
        self.lists[verdict].append({"kind": kind, "subject": subject, "what": what, "base": base, "new": new, **more})

    def ordered(self) -> Verdicts:
        rank = {k: i for i, k in enumerate(KIND_ORDER)}

        def by_kind(entries: list[DiffEntry]) -> list[DiffEntry]:
            return sorted(entries, key=lambda e: rank.get(e["kind"], len(rank)))

        return {
            "regressions": by_kind(self.lists["regressions"]),
            "improvements": by_kind(self.lists["improvements"]),
            "changed": by_kind(self.lists["changed"]),
            "unchanged": by_kind(self.lists["unchanged"]),
        }


def relative(file: str | None, run: Located) -> str | None:
    """A file as the job's working directory saw it: runs made in two
    checkouts still name one place."""
    cwd = run.get("cwd")
    if file and cwd and file.startswith(cwd.rstrip("/") + "/"):
        return file[len(cwd.rstrip("/")) + 1 :]
    return file


def place(file: str | None, line: int | None) -> str:
    return where(file, line) if file else "?"


def frame_key(f: Frame, run: Located) -> FrameKey:
    return (relative(f.get("file"), run), f.get("line"), f.get("name"))


def more_is_worse(a: float, b: float) -> str:
    return "regressions" if b > a else "improvements" if b < a else "unchanged"
