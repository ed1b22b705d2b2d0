"""The process panel: the job's CPU, memory, threads and the host's load."""

from __future__ import annotations

from itertools import islice

from rich.text import Text

from ctmon.tui import fmt
from ctmon.tui.context import job_label, put_title
from ctmon.tui.panels.base import Panel, num
from ctmon.tui.panels.samples import absent_samples, recent_samples


class ProcessPanel(Panel):
    SECTIONS = ("samples",)

    def set_title(self) -> None:
        # the sampler follows the job's whole process tree: under a launcher, every rank on this host
        put_title(self, f"Process{job_label(self.ctx)}")

    def render_text(self) -> Text:
        s = self.ctx.session
        w, h = self.content_width, self.content_height
        latest = None
        for ev in islice(reversed(s.samples), 5):
            if ev.cpu_percent is not None:
                latest = ev
                break
        if latest is None:
            return Text(absent_samples(s), style="dim italic")
        cpu = num(latest.cpu_percent)
        cpus = latest.cpus
        hist = [num(ev.cpu_percent) for ev in recent_samples(s, max(4, min(30, w - 22)))]
        top = max(100.0, max((v for v in hist if v is not None), default=100.0))
        of = f" of {cpus}" if isinstance(cpus, int) else ""
        l1 = Text.assemble(
            "CPU ", (f"{cpu:.0f}%" if cpu is not None else "N/A", "bold"), f"{of} ", (fmt.sparkline(hist, top), "cyan")
        )
        rss, tree = latest.rss, latest.tree_rss
        threads, procs = latest.threads, latest.procs
        tree_t = f" (tree {fmt.size(tree)})" if isinstance(tree, int) and isinstance(rss, int) and tree > rss else ""
        l2 = Text.assemble("RSS ", (fmt.size(tree if isinstance(tree, int) else rss), "bold"))
        extra = f" · {fmt.plural(threads, 'thread')}" if isinstance(threads, int) else ""
        if isinstance(procs, int) and procs > 1:
            extra += f" · {procs} procs"
        l2.append(extra)
        lines = [l1, l2]
        if h >= 3:
            if tree_t and l2.cell_len + len(tree_t) <= w:
                l2.append(tree_t, style="dim")
            used, total, sys_cpu = latest.sys_mem_used, latest.sys_mem_total, num(latest.sys_cpu_percent)
            if isinstance(used, int) and isinstance(total, int):
                sc = f"{sys_cpu:.0f}% CPU · " if sys_cpu is not None else ""
                lines.append(Text(f"host {sc}{fmt.gib(used)}/{fmt.gib(total)} GiB", style="dim"))
        return Text("\n").join(lines)
