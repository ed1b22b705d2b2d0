"""Sentences the text and Markdown reports both say of a run: its compile
counts, generate() calls, step numbering, ranks, and the notes a reader
must see."""

from __future__ import annotations

from ctmon.report.model import Generation, Note, Rank, Report, StepNumbers, Steps, cache_results
from ctmon.words.phrases import plural
from ctmon.words.units import ms_or_s

NOTES_SHOWN = 20  # warning notes listed in a report; the rest are counted


def compile_counts_text(compiles: int, recompiles: int, limit_hits: int, limit: int | None = None) -> str:
    """``8 compiles, 7 recompiles + 1 refused at the recompile limit``: an
    attempt the limit refused compiled nothing, so it is said apart (the
    report's ``compiles`` and ``recompiles`` count attempts, refused ones
    included: every refusal is of a recompile)."""
    of = f" ({limit})" if limit else ""
    if not limit_hits:
        return f"{plural(compiles, 'compile')}, {plural(recompiles, 'recompile')}"
    return (
        f"{plural(max(0, compiles - limit_hits), 'compile')}, {plural(max(0, recompiles - limit_hits), 'recompile')}"
        f" + {limit_hits:,} refused at the recompile limit{of}"
    )


def generation_text(g: Generation) -> str:
    """One line on the job's generate() calls (report key ``generation``)."""
    calls = g["calls"]
    ttft = (
        f"first token {ms_or_s(g['ttft_ms'])}"
        if g.get("ttft_ms") is not None
        else "first token not timed (needs Python 3.12+)"
    )
    if g.get("ttft_ms") is not None and calls > 1:
        ttft = f"first token p50 {ms_or_s(g['ttft_ms'])} (max {ms_or_s(g['ttft_max_ms'])})"
    per_token = (
        f"per token p50 {ms_or_s(g['token_p50_ms'])}, p90 {ms_or_s(g['token_p90_ms'])}"
        if g.get("token_p50_ms") is not None
        else "per-token latency not known"
    )
    return (
        f"{calls} generate() call{'s' if calls != 1 else ''}, {g['tokens']} token{'s' if g['tokens'] != 1 else ''} "
        f"(prefill {g['prefill']}): {ttft}; {per_token}"
    )


# where the job's own step numbers came from, by the step source that carried them
NUMBERED_BY = {"optimizer": "its optimizer's step count", "api": "ctmon.step(n)"}


def numbering_text(nums: StepNumbers, source: str | None) -> str:
    """``step numbers 1–240, counted by ctmon from 1``: which numbering the
    findings' "step N" use (report key ``steps.numbers``; ``source``: the
    step source that carried the job's own numbers)."""
    span = f"{nums['first']}–{nums['last']}" if nums["last"] != nums["first"] else f"{nums['first']}"
    if nums["by"] == "job":
        return f"step numbers {span}, the job's own ({NUMBERED_BY.get(source or '', 'its own count')})"
    return f"step numbers {span}, counted by ctmon from 1"


def first_step_text(st: Steps) -> str | None:
    """What the figures leave out: the first step, which only a compiled
    call's start can time where an optimizer or ctmon.step() ends the steps."""
    nums = st.get("numbers")
    if not nums or st.get("source") == "compiled_call":
        return None  # its first interval is the first step's: in the figures
    first = nums["first"]
    if st.get("first_step_ms") is None:
        return f"step {first}, the first, is untimed (nothing marked its start) and not in the figures below"
    return (
        f"step {first}, the first, took {ms_or_s(st['first_step_ms'])} from the first compiled call's start "
        "(its compiles included; not in the figures below)"
    )


def warning_notes(r: Report) -> list[Note]:
    """What ctmon or the agent warned about during the run (a rank that exec'd
    away, events lost, a hook disabled): the notes a reader must see. Not
    Dynamo's own errors (a failed attempt's traceback): the findings say
    what they mean."""
    return [
        n
        for n in r.get("notes") or []
        if n.get("level") in ("warning", "error") and n.get("message") and n.get("source") != "dynamo"
    ]


def all_ranks(r: Report, before: str = ", ", after: str = "") -> str:
    """The scope of a job-wide total in a job of several ranks."""
    ranks = r.get("ranks") or []
    return f"{before}summed over {len(ranks)} ranks{after}" if len(ranks) >= 2 else ""


def one_rank(r: Report) -> str:
    """The scope of a figure read from the primary rank's store."""
    ranks = r.get("ranks") or []
    return f", on rank {primary(ranks)}" if len(ranks) >= 2 else ""


def primary(ranks: list[Rank]) -> str:
    return next((str(x["rank"]) for x in ranks if x.get("primary")), "?")


def rank_lines(ranks: list[Rank]) -> list[str]:
    """One line per rank, the slowest (by median step) marked."""
    p50s = {x["rank"]: p50 for x in ranks if (p50 := x["steps"].get("p50_ms")) is not None}
    slowest = max(p50s, key=lambda k: p50s[k]) if len(p50s) > 1 else None
    if slowest is not None and p50s[slowest] <= 1.1 * min(p50s.values()):
        slowest = None  # within 10 % of the fastest: none stands out
    out: list[str] = []
    for x in ranks:
        st, c = x["steps"], x["compile"]
        fx = cache_results(x.get("cache") or {}, "fx_graph")
        # a PyTorch trace holds no steps: its count is None (absent), said as such, not as 0
        steps = "steps not traced" if st["count"] is None else plural(st["count"], "step")
        steps += f", p50 {ms_or_s(st['p50_ms'])}" if st.get("p50_ms") is not None else ""
        who = ", ".join(p for p in (x.get("host"), f"pid {x['pid']}" if x.get("pid") is not None else None) if p)
        out.append(
            f"rank {x['rank']}"
            + (f" ({who})" if who else "")
            + f": {steps}; {compile_counts_text(c['compiles'], c['recompiles'], c.get('limit_hits') or 0)}, "
            f"{plural(c['graph_breaks'], 'break')}; "
            f"FX cache {fx.get('hit', 0)} hit / {fx.get('miss', 0)} miss"
            + (
                f"; exit {x['exit_code']}" + (f" ({x['exit_signal']})" if x.get("exit_signal") else "")
                if x.get("exit_code") is not None
                else ""
            )
            + ("  ← slowest" if x["rank"] == slowest else "")
        )
    return out
