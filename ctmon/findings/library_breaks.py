"""Graph breaks inside code the user did not write.

A break whose site lies in an installed package (torch, transformers), or in
the standard library, is not the user's to remove: "delete the graph_break()
call" or "register it as a custom op" would be advice about PyTorch's own
source. Two kinds:

* breaks PyTorch makes on purpose, known here by where they are and what they
  say -- the optimizer's no_grad split around ``step()``, DistributedDataParallel's
  own bookkeeping -- are info findings that say why they exist and what, if
  anything, the user can do;
* any other break in a library keeps its cause's finding, with advice the
  user can act on: which package, the user's line that leads there, and the
  moves that are theirs (compile a part without it, a newer release, a report).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctmon.words.locations import in_package

if TYPE_CHECKING:
    from ctmon.store.compiles import BreakSite
    from ctmon.wire import events as E


@dataclass(frozen=True)
class ByDesign:
    key: str
    # (the site's file ends with, the break's reason contains -- lower-case):
    # any pair that holds is a match; '' holds always
    matches: tuple[tuple[str, str], ...]
    title: str
    detail: str
    fix: str


BY_DESIGN = (
    ByDesign(
        key="optimizer-step",
        matches=(("torch/optim/optimizer.py", "graph_break()"),),
        title="PyTorch's optimizer splits the graph around step() on purpose",
        detail=(
            "torch.optim's step() calls torch._dynamo.graph_break() before and after the update, so AOTAutograd "
            "sees it as a no-grad graph and updates the parameters in place instead of allocating new ones "
            "(pytorch/pytorch#104053). The split is the intended shape of a compiled optimizer step."
        ),
        fix=(
            "Nothing to change: keep compiling the step as it is (the PyTorch tutorial's recipe, "
            "`torch.compile(opt.step)` or a compiled function that calls it). To keep the split out of the "
            "forward and backward, compile the model and the optimizer step separately rather than one function "
            "that does both."
        ),
    ),
    ByDesign(
        key="ddp",
        # its forward's own code, and the context managers it enters (their
        # site is contextlib's, the reason names DDP)
        matches=(("torch/nn/parallel/distributed.py", ""), ("", "distributeddataparallel.")),
        title="DistributedDataParallel's own bookkeeping runs eager on purpose",
        detail=(
            "Compiling a DDP-wrapped model, Dynamo skips DDP's forward bookkeeping (its no_sync state, bucket "
            "rebuilding: DDP excludes it from Dynamo on purpose) and compiles the module inside it as a frame of "
            "its own, split at DDP's gradient buckets so all-reduce overlaps the backward "
            "(torch._dynamo.config.optimize_ddp). These breaks are that bookkeeping: each costs an eager hop per call."
        ),
        # Both forms split at the buckets: Dynamo finds the active DDP module
        # whichever is compiled (torch/_dynamo/convert_frame.py, DDPOptimizer).
        fix=(
            "Nothing to remove: the breaks are in DDP's own code. Both `torch.compile(DDP(model))` and "
            "`DDP(torch.compile(model))` split the graph at DDP's gradient buckets (DDPOptimizer); the second "
            "leaves DDP's bookkeeping out of the compiled region, so these breaks and their eager hops are gone."
        ),
    ),
)


def by_design(site: BreakSite) -> ByDesign | None:
    """The known, intended break this site is, if any."""
    file = (site.file or "").replace(os.sep, "/")
    says = " ".join(x for x in (site.reason, site.detail) if x).lower()
    for d in BY_DESIGN:
        if any(file.endswith(path) and text in says for path, text in d.matches):
            return d
    return None


def package_of(path: str | None) -> str | None:
    """The installed package a library file belongs to ('transformers'), 'the standard library', or None."""
    if not path:
        return None
    packaged = in_package(path)
    if packaged is not None:
        return packaged.split("/", 1)[0].removesuffix(".py")
    if "/lib/python3" in path.replace(os.sep, "/"):
        return "the standard library"
    return None


def library_fix(site: BreakSite) -> str:
    """Advice for a break inside a library that PyTorch does not make on purpose."""
    pkg = package_of(site.file) or "a library"
    return (
        f"This break is inside {pkg}, not in your code (the finding names your line that leads there): "
        "its source is not yours to change. "
        "What you can do: compile a part that does not run through it (e.g. the model's forward rather than a "
        f"wrapper around it, or the layers inside), try a newer {pkg} release, or report it to {pkg} with "
        "PyTorch's explanation (above); if it is met once per step, it costs one eager hop per step."
    )


def library_says_fix(said: E.LibraryLog) -> str:
    """The library's own message at the break's line: it names what the
    library does there, and so the setting that keeps it from doing it."""
    who = (said.logger or "the library").split(".")[0]
    text = said.message.strip()
    setting = _SETTING.search(text)
    if setting is not None:
        what = f"Pass {setting.group(1)} yourself, as {who} does anyway: "
    else:
        what = "Do in your own call what it describes: "
    return (
        f"{who} explains this line itself: \u201c{text}\u201d {what}the branch that logs -- this graph break -- "
        "is then not taken."
    )


# "... Setting `use_cache=False`." -- the setting a library applies for the user
_SETTING = re.compile(r"[Ss]etting (`[^`]{1,80}`)")
