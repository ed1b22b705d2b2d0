"""ctmon and tlparse read the same TORCH_TRACE and agree on the facts.

tlparse (PyTorch's own trace reader, a binary wheel) writes
``compile_directory.json``: per compile id (``[frame/compile]``, with
``_N`` for a restarted attempt) the artifacts it found -- one
``compilation_metrics`` per finished compile, a ``recompile_reasons`` per
recompile, a ``dynamo_graph_break_reason`` per graph break, an
``fx_graph_cache_hit/miss/bypass`` per FX cache lookup. ``ctmon report
DIR --json`` must count the same.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from helpers import ctmon, env_with, workload

TLPARSE = shutil.which("tlparse") or os.path.join(os.path.dirname(sys.executable), "tlparse")
pytestmark = [pytest.mark.skipif(not os.path.exists(TLPARSE), reason="tlparse is not installed"), pytest.mark.slow]
_ARTIFACT = re.compile(r"^(.*)_\d+\.\w+$")


def tlparse_facts(trace: str, out: str) -> tuple[Counter[str], set[str]]:
    run = subprocess.run([TLPARSE, trace, "-o", out, "--no-browser", "--overwrite"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    with open(os.path.join(out, "compile_directory.json")) as f:
        directory: dict[str, Any] = json.load(f)
    kinds: Counter[str] = Counter()
    finished: set[str] = set()  # compile ids with metrics, restarted attempts ("0/0_1") as their compile
    for cid, entry in directory.items():
        for art in entry.get("artifacts", []):
            m = _ARTIFACT.match(art["name"])
            if m:
                kinds[m.group(1)] += 1
                if m.group(1) == "compilation_metrics":
                    finished.add(cid.strip("[]").split("_")[0])
    return kinds, finished


@pytest.mark.parametrize("argv", [[workload("graph_breaks.py")], [workload("cache_model.py"), "40"]])
def test_ctmon_counts_what_tlparse_finds_in_the_same_trace(tmp_path, argv, request):
    if argv == [workload("graph_breaks.py")]:  # aot_eager: no Inductor cache, the session's plain trace
        trace = request.getfixturevalue("graph_breaks_trace")
    else:
        trace = str(tmp_path / "trace")
        env = env_with(TORCH_TRACE=trace, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"))
        subprocess.run([sys.executable, *argv], env=env, check=True, capture_output=True, timeout=300)
    (log,) = os.listdir(trace)
    tl, ids = tlparse_facts(os.path.join(trace, log), str(tmp_path / "tl"))
    out = ctmon("report", trace, "--json")
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    c, fx = rep["compile"], rep["cache"]["fx_graph"]
    assert c["compiles"] == tl["compilation_metrics"] >= 1
    assert c["backward_compiles"] == tl["bwd_compilation_metrics"]
    assert c["recompiles"] == tl["recompile_reasons"]
    assert c["graph_breaks"] == tl["dynamo_graph_break_reason"]
    # where compiles began: every compile id tlparse lists, under the user's line that called in
    assert {i for site in rep["compile_sites"] for i in site["compile_ids"]} == ids
    assert all(site["file"] == argv[0] for site in rep["compile_sites"])
    assert (fx["hit"], fx["miss"], fx["bypass"]) == (
        tl["fx_graph_cache_hit"],
        tl["fx_graph_cache_miss"],
        tl["fx_graph_cache_bypass"],
    )
