"""``report --md`` as a CommonMark renderer shows it (markdown-it-py, the
parser rich and textual use; GitHub renders CommonMark too): code spans
whole, PyTorch's links clickable, no stray backticks or emphasis."""

from __future__ import annotations

import os

from helpers import ROOT, ctmon
from markdown_it import MarkdownIt

from ctmon.report.markdown import code, inline


def _tokens(md: str) -> list:  # type: ignore[type-arg]
    out = []
    for block in MarkdownIt("commonmark").parse(md):
        out += block.children or []
    return out


def test_a_real_report_renders_with_its_code_spans_and_links_whole():
    rec = os.path.join(ROOT, "tests", "fixtures", "recordings", "many_breaks.jsonl")
    md = ctmon("report", rec, "--md").stdout
    toks = _tokens(md)
    stray = [t.content for t in toks if t.type == "text" and "`" in t.content]
    assert not stray, stray  # a broken code span leaves its backticks in the text
    links = [t.attrs["href"] for t in toks if t.type == "link_open"]
    assert any(h.startswith("https://meta-pytorch.github.io/compile-graph-break-site/") for h in links), links
    codes = [t.content for t in toks if t.type == "code_inline"]
    assert "torch._dynamo.graph_break()" in codes
    assert not [t for t in toks if t.type == "em_open"]  # underscores in names are not emphasis


def test_awkward_text_stays_what_it_says():
    text = "a `code | with pipe` then `` `ticks` `` and `https://x.org/a_b` and *stars* and x_y_z"
    toks = _tokens(inline(text))
    assert [t.content for t in toks if t.type == "code_inline"] == ["code | with pipe", "`ticks`"]
    assert [t.attrs["href"] for t in toks if t.type == "link_open"] == ["https://x.org/a_b"]
    rendered = "".join(t.content for t in toks if t.type in ("text", "code_inline"))
    assert "*stars*" in rendered and "x_y_z" in rendered
    assert [t.content for t in _tokens(code("say `hi`"))] == ["say `hi`"]
