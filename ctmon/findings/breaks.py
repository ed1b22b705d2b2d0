"""Graph breaks, grouped by cause, each site at the user's file:line, with the fix.

A break in code that runs every step costs every step (the graph is split, and
the Python in between runs eagerly); a break met once (set-up, a final
evaluation) costs once. The two are separate findings: breaks in the step
loop are warnings and rank above one-offs, which are info. A break counts as
"in the loop" when Dynamo met it before the last step boundary of the run.
A job that failed before its first step completed has no loop to place its
breaks in: they are "before the job failed", warnings (the loop would have
met them on every step).

The cause comes from PyTorch's own graph-break type (the summary line), then
its explanation. The fix starts with what PyTorch says about the break: its
explanation and hints, verbatim, with the graph-break id (GB0123) and its page
(pytorch_hints.py adds the real name of a setting a hint misspells). ctmon's
own advice follows only where it knows more, and never suggests a setting the
job already has at that value: it says so instead.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import TYPE_CHECKING

from ctmon.findings.break_words import (
    AUTOGRAD,
    BRANCH,
    CALL,
    DYN_SHAPE,
    EXPLICIT,
    FIXES,
    LOGGING,
    NUMPY,
    OTHER,
    SCALAR_OUT,
    TITLES,
    TORCH_FOR_NUMPY,
)
from ctmon.findings.guards import strip_comment
from ctmon.findings.library_breaks import ByDesign, by_design, library_fix, library_says_fix
from ctmon.findings.model import RANK_BREAKS, Finding, Fix, code_fix
from ctmon.findings.pytorch_hints import (
    CAPTURE_DYNAMIC_SHAPES,
    CAPTURE_SCALARS,
    TRACE_AUTOGRAD,
    Setting,
    already_set,
    hint_settings,
    quote,
    setting_fixes,
    suggest,
)
from ctmon.findings.ran_eager import covered_by_empty_graphs
from ctmon.wire import events as E

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ctmon.store.compiles import BreakSite, ConfigValue
    from ctmon.store.session import Session
    from ctmon.wire import events as E

# Graph breaks that are PyTorch's "autograd op with trace_autograd_ops off": GB0123 (Tensor.backward())
# and GB9186 (torch.autograd.grad); GB4927 (the grad_fn of a returned tensor consumed) is what follows.
_AUTOGRAD_OFF = ("gb0123", "gb9186")
_AUTOGRAD_IDS = (*_AUTOGRAD_OFF, "gb4927")

# Modules whose calls only make sense outside the graph: move them out.
_SIDE_EFFECT_MODULES = ("time.", "os.", "posix.", "socket.", "datetime.", "gc.", "sys.", "psutil.", "random.")

_NP_FN = re.compile(r"numpy function <function (?P<fn>\w+) at")
_SKIPPED = re.compile(r"marked as skipped: (?P<fn>[\w.]+?)\.?$")


def category(site: BreakSite) -> str:
    summary = (site.reason or "").lower()
    main = " ".join(x for x in (site.reason, site.explanation) if x).lower()
    if (
        "print" in summary
        or "logging" in summary
        or "warn" in summary
        or "debugging function" in summary
        # not PyTorch's "if you are attempting to call a logging function"
        # hint: it comes with every untraceable builtin (range over a tensor)
        or "builtin operator `print`" in main
    ):
        return LOGGING
    if (site.gb_id or "").lower() in _AUTOGRAD_IDS or "backward()" in summary or "autograd.grad" in summary:
        return AUTOGRAD
    if "item()" in summary or "tolist" in summary or "_local_scalar_dense" in main or "capture_scalar_outputs" in main:
        return SCALAR_OUT
    if "data-dependent branching" in summary or "data dependent branch" in main or "generic_jump" in main:
        return BRANCH
    if "dynamic shape operator" in summary or "capture_dynamic_output_shape_ops" in main:
        return DYN_SHAPE
    if "numpy" in main or "ndarray" in main:
        return NUMPY
    if "graph_break()" in summary:
        return EXPLICIT
    if (
        "marked as skipped" in summary
        or "unsupported" in summary
        or "builtin" in main
        or "custom op" in main
        or "not supported" in summary
    ):
        return CALL
    if site.detail and "generic_jump" in site.detail.lower():
        return BRANCH
    return OTHER


def skipped_function(site: BreakSite) -> str | None:
    """The call Dynamo refused ('time.time'), from a 'marked as skipped' break."""
    m = _SKIPPED.search(site.reason or "")
    return f"{m.group('fn').rstrip('.')}()" if m else None


def _specific_fix(cat: str, sites: list[BreakSite]) -> str:
    """One sentence naming the actual call, for the top sites of a cause."""
    out = []
    for b in sites[:3]:
        text = " ".join(x for x in (b.reason, b.explanation, b.detail) if x)
        if cat == NUMPY:
            m = _NP_FN.search(text)
            if m and m.group("fn") in TORCH_FOR_NUMPY:
                out.append(f"For np.{m.group('fn')} use {TORCH_FOR_NUMPY[m.group('fn')]}.")
            elif m:
                out.append(f"np.{m.group('fn')} is not in torch._numpy: rewrite it with torch ops.")
        elif cat == CALL:
            m = _SKIPPED.search(b.reason or "")
            if m:
                fn = m.group("fn").rstrip(".")
                if fn.startswith(_SIDE_EFFECT_MODULES):
                    out.append(
                        f"`{fn}()` only has side effects or reads the host: call it outside the compiled "
                        "function (before or after the compiled call) and pass in what the graph needs."
                    )
                else:
                    out.append(
                        f"`{fn}` cannot be traced: register it with torch.library.custom_op, or call it "
                        "outside the compiled function."
                    )
        elif cat == LOGGING and "logging.logger" in (b.reason or "").lower():
            out.append(
                "This is a logging.Logger call: torch._dynamo.config.ignore_logging_functions.add(logger.info) "
                "(with your logger's method) drops it under compile."
            )
    seen: list[str] = []
    for x in out:
        if x not in seen:
            seen.append(x)
    return " ".join(seen)


LOOP, ONCE, FAILED = "loop", "once", "failed"
_WHEN = {LOOP: "in the step loop", ONCE: "outside the step loop", FAILED: "before the job failed"}


def in_loop(s: Session, site: BreakSite) -> bool:
    series = s.steps.current
    if series is None or len(series) < 2:
        return False
    last = series.times[-1]
    return site.first_t <= last


def _failed_early(s: Session) -> bool:
    series = s.steps.current
    return s.exit is not None and s.exit.known and s.exit.status != 0 and (series is None or len(series) < 2)


def _when(s: Session, site: BreakSite) -> str:
    if in_loop(s, site):
        return LOOP
    return FAILED if _failed_early(s) else ONCE


Logs = dict[tuple[str | None, int | None], E.LibraryLog]


def _logged_at(site: BreakSite, logs: Logs | None) -> E.LibraryLog | None:
    """What the library logged at a break's line (a logging call is itself the break)."""
    return logs.get((site.file, site.line)) if logs else None


def _evidence(sites: list[BreakSite], when: str) -> list[str]:
    evidence = []
    for b in sites[:10]:
        where = f"{b.file}:{b.line}" if b.file else "?"
        code = ""
        if b.user_stack and b.user_stack[-1].code:
            code = f"  `{strip_comment(b.user_stack[-1].code)}`"
        evidence.append(f"{where} ×{b.count} ({when}): {b.reason}{code}")
    if len(sites) > 10:
        evidence.append(f"… and {len(sites) - 10} more sites")
    if sites[0].url:
        evidence.append(f"PyTorch: {sites[0].url}")
    return evidence


def _counted(sites: list[BreakSite]) -> str:
    total = sum(b.count for b in sites)
    return f"{len(sites)} site{'s' if len(sites) != 1 else ''}, {total} break{'s' if total != 1 else ''}"


def _float_tolist(site: BreakSite) -> bool:
    """.tolist() of a float tensor (GB0109): capture_scalar_outputs does not cover it, on or off."""
    return (site.gb_id or "").lower() == "gb0109" or "tolist() with non-integer" in (site.reason or "").lower()


def _setting(setting: Setting, sites: list[BreakSite], config: Mapping[str, ConfigValue], **how: str) -> str:
    """ctmon's sentence about a setting (pytorch_hints.suggest), or nothing
    where PyTorch's hints for these breaks already name it (quoted first,
    with its real name, and with a word if the job has it on already)."""
    if any(setting.name == h.name for b in sites for h in hint_settings(b.hints)):
        return ""
    return suggest(setting, config, **how)


def _ctmon_fix(cat: str, sites: list[BreakSite], config: Mapping[str, ConfigValue]) -> str:
    """ctmon's own advice for a cause, after PyTorch's: a setting only where
    it covers these breaks and the job does not have it yet."""
    if cat == SCALAR_OUT:
        if not all(_float_tolist(b) for b in sites):
            how = {
                "lead": "If a Python number is truly needed inside, set ",
                "why": " so .item() is captured in the graph as a symbolic value instead of splitting it",
            }
            setting = _setting(CAPTURE_SCALARS, sites, config, **how)
        elif already_set(CAPTURE_SCALARS, config):
            setting = suggest(CAPTURE_SCALARS, config, not_covering=".tolist() of a float tensor")
        else:  # no fix here either: say so before someone tries it
            setting = f"({CAPTURE_SCALARS.name} does not cover .tolist() of a float tensor.)"
        return f"{FIXES[SCALAR_OUT]} {setting}".strip()
    if cat == DYN_SHAPE:
        how = {"why": " so nonzero()/unique()/masked indexing stay in the graph", "not_covering": "this operator"}
        return f"{_setting(CAPTURE_DYNAMIC_SHAPES, sites, config, **how)} {FIXES[DYN_SHAPE]}".strip()
    if cat == AUTOGRAD:
        if not any((b.gb_id or "").lower() in _AUTOGRAD_OFF for b in sites):
            return ""  # GB4927: PyTorch's hint is the fix
        if already_set(TRACE_AUTOGRAD, config):  # then GB0123 has another cause: PyTorch's words say which
            return _setting(TRACE_AUTOGRAD, sites, config)
        return f"{_setting(TRACE_AUTOGRAD, sites, config, why=' before the compiled call')} {FIXES[AUTOGRAD]}".strip()
    specific = _specific_fix(cat, sites)
    if cat == CALL and not any(skipped_function(b) for b in sites):
        return specific  # not a skipped function: PyTorch's reason and hints say what to do
    if cat == OTHER:
        return specific
    return f"{specific} {FIXES[cat]}".strip()


# The change at a break's own line, per cause (the prose above says why).
CODE_FIXES = {
    LOGGING: "move the print/log call out of the compiled function (log the returned tensors after the call)",
    SCALAR_OUT: "keep the value a tensor here; call .item()/.tolist() on the returned tensor after the compiled call",
    BRANCH: "torch.where(cond, a, b) (or torch.cond(pred, true_fn, false_fn, (operands,))) instead of the Python if",
    EXPLICIT: "remove torch._dynamo.graph_break()",
    AUTOGRAD: "return loss.detach() from the compiled function (with trace_autograd_ops on)",
}


def _fixes(cat: str, sites: list[BreakSite], config: Mapping[str, ConfigValue]) -> list[Fix]:
    """The fix as data: the settings PyTorch's hints name, then ctmon's own,
    none the job already has; then the change at the top site's line."""
    named = [h for b in sites for h in hint_settings(b.hints)]
    own: list[Setting] = []
    if cat == SCALAR_OUT:
        if all(_float_tolist(b) for b in sites):  # the setting does not cover these: not a fix
            named = [h for h in named if h.name != CAPTURE_SCALARS.name]
        else:
            own.append(CAPTURE_SCALARS)
    elif cat == DYN_SHAPE:
        own.append(CAPTURE_DYNAMIC_SHAPES)
    elif cat == AUTOGRAD and any((b.gb_id or "").lower() in _AUTOGRAD_OFF for b in sites):
        own.append(TRACE_AUTOGRAD)
    out = setting_fixes([*named, *own], config)
    top = sites[0]
    text = CODE_FIXES.get(cat) or _specific_fix(cat, sites[:1])
    if cat == AUTOGRAD and own and already_set(TRACE_AUTOGRAD, config):
        text = ""  # trace_autograd_ops on and still GB0123: PyTorch's words say the cause
    if text:
        out.append(code_fix(text, top.file, top.line))
    return out


def _pytorch_says(sites: list[BreakSite], config: Mapping[str, ConfigValue]) -> str:
    """PyTorch's explanation and hints for each kind of break among the top
    sites (once per graph-break id), verbatim."""
    out: list[str] = []
    seen: set[str] = set()
    for b in sites:
        kind = b.gb_id or b.reason
        if kind in seen:
            continue
        seen.add(kind)
        text = quote(b.gb_id, b.url, b.explanation, b.hints, config)
        if text:
            out.append(text)
        if len(seen) == 3:
            break
    return " ".join(out)


def _finding(
    cat: str,
    sites: list[BreakSite],
    state: str,
    library: bool = False,
    logs: Logs | None = None,
    config: Mapping[str, ConfigValue] | None = None,
) -> Finding:
    sites.sort(key=lambda b: (-b.count, b.file or "", b.line or 0))
    top = sites[0]
    total = sum(b.count for b in sites)
    looped = state != ONCE
    when = _WHEN[state]
    said = [m for m in (_logged_at(b, logs) for b in sites) if m is not None]
    config = config or {}
    fixes: list[Fix] = []
    if library:  # advice about the library's own source would be advice the user cannot take
        fix = library_fix(top)
        if said:
            fix = library_says_fix(said[0]) + " " + fix
    else:
        fix = _ctmon_fix(cat, sites, config)
        fixes = _fixes(cat, sites, config)
    # PyTorch's own words first, never dropped; ctmon's where it knows more
    pytorch = _pytorch_says(sites, config)
    fix = (f"{pytorch} ctmon: {fix}" if fix else pytorch) if pytorch else fix or FIXES[OTHER]
    return Finding(
        id=f"graph-breaks:{cat}"
        + {LOOP: "", ONCE: ":outside-loop", FAILED: ":before-failure"}[state]
        + (":library" if library else ""),
        rule="graph-breaks",
        severity="warning" if looped else "info",
        title=f"{TITLES[cat]} {when}{' (inside a library)' if library else ''}: {_counted(sites)}",
        file=top.file,
        line=top.line,
        detail={
            LOOP: "Each break splits the graph: the code around it runs eagerly between two compiled graphs on "
            "every step, and fusion across it is lost.",
            ONCE: "Met outside the step loop (set-up or after the last step): it costs once, not every step.",
            FAILED: "The job failed before its first step completed, so these breaks were met in what would "
            "have been the first step: each splits the graph on every step once the job runs.",
        }[state],
        evidence=_evidence(sites, when) + [f"{m.logger or 'the library'} logged there: {m.message}" for m in said[:3]],
        fix=fix,
        fixes=fixes,
        rank=(RANK_BREAKS if looped else 0) + min(total, 99),
    )


def _by_design_finding(d: ByDesign, sites: list[BreakSite], state: str) -> Finding:
    """PyTorch's own intended break: info, whatever the loop -- there is nothing to remove."""
    sites.sort(key=lambda b: (-b.count, b.file or "", b.line or 0))
    top = sites[0]
    return Finding(
        id=f"graph-breaks:by-design:{d.key}",
        rule="graph-breaks",
        severity="info",
        title=f"{d.title}: {_counted(sites)}",
        file=top.file,
        line=top.line,
        detail=d.detail,
        evidence=_evidence(sites, _WHEN[state]),
        fix=d.fix,
        rank=0,
    )


def _config_behind(s: Session, sites: list[BreakSite]) -> dict[str, ConfigValue]:
    """The Dynamo settings in force in every compile that met these breaks."""
    return s.compile.config_in_force(cid for b in sites for cid in b.compile_ids)


def rule_graph_breaks(s: Session) -> list[Finding]:
    groups: dict[tuple[str, str, bool], list[BreakSite]] = defaultdict(list)
    designed: dict[str, tuple[ByDesign, list[BreakSite], str]] = {}
    for site in s.compile.breaks.values():
        state = _when(s, site)
        d = by_design(site)
        if d is not None:
            entry = designed.setdefault(d.key, (d, [], state))
            entry[1].append(site)
            continue
        groups[(category(site), state, site.called_from is not None)].append(site)
    logs = s.compile.library_logs
    out = [
        _finding(cat, sites, state, library, logs, _config_behind(s, sites))
        for (cat, state, library), sites in groups.items()
    ]
    # a cause the empty-graphs finding tells (DDP over a module of PyTorch's) is not told twice
    out += [
        _by_design_finding(d, sites, state)
        for d, sites, state in designed.values()
        if not covered_by_empty_graphs(s, d.key)
    ]
    return out


RULES = (rule_graph_breaks,)
