"""The GPU panel: utilisation, memory, power and temperature per device."""

from __future__ import annotations

import textwrap
from typing import Any

from rich.text import Text

from ctmon.tui import fmt
from ctmon.tui.context import job_label, put_title
from ctmon.tui.panels.base import Panel, num
from ctmon.tui.panels.samples import absent_samples, gpu_error, latest_gpus, recent_samples
from ctmon.wire.events import Sample


class GpuPanel(Panel):
    SECTIONS = ("samples", "meta")

    def set_title(self) -> None:
        gpus = latest_gpus(self.ctx.session)
        put_title(self, (f"GPU · {len(gpus)}" if gpus and len(gpus) > 1 else "GPU") + job_label(self.ctx))

    def gpu_rows(self) -> list[dict[str, Any]]:
        """The numbers the panel shows, per GPU (also used by benchmarks/gpu/panel_check.py)."""
        gpus = latest_gpus(self.ctx.session) or []
        rows = []
        for g in gpus:
            rows.append(
                {
                    "index": g.index,
                    "name": g.name,
                    "util": num(g.util),
                    "mem_used": num(g.mem_used),
                    "mem_total": num(g.mem_total),
                    "power_w": num(g.power_w),
                    "power_limit_w": num(g.power_limit_w),
                    "temp_c": num(g.temp_c),
                    "proc_mem": num(g.proc_mem),
                }
            )
        return rows

    def render_text(self) -> Text:
        ctx = self.ctx
        s = ctx.session
        w, h = self.content_width, self.content_height
        rows = self.gpu_rows()
        if not rows:
            err = gpu_error(ctx)
            if err:
                lines = textwrap.wrap(f"no GPU: {err}", max(10, w)) or ["no GPU"]
                t = Text("\n".join(lines), style="dim")
                t.stylize("bold", 0, len("no GPU:"))
                return t
            if not s.samples:
                return Text(absent_samples(s), style="dim italic")
            return Text("no GPU data in the samples", style="dim")
        per = 3 if len(rows) * 3 <= h else (2 if len(rows) * 2 <= h else 1)
        if len(rows) > h:
            return self._gpu_table(rows, w, h)
        history = recent_samples(s, max(8, w))
        out: list[Text] = []
        for g in rows:
            out += self._gpu_lines(g, per, w, history)
        return Text("\n").join(out)

    def _gpu_table(self, rows: list[dict[str, Any]], w: int, h: int) -> Text:
        """More GPUs than lines: one line per quantity, one column per GPU."""

        def col(v: float | None, digits: int = 0) -> str:
            return f"{v:>3.{digits}f}" if v is not None else "N/A"

        utils = Text("util% ")
        for g in rows:
            utils.append(col(g["util"]) + " ", _util_style(g["util"]))
        total = next((g["mem_total"] for g in rows if g["mem_total"]), None)
        mems = Text("mem G ")
        for g in rows:
            mems.append(col(g["mem_used"] / (1 << 30) if g["mem_used"] is not None else None) + " ")
        if total:
            mems.append(f"of {total / (1 << 30):.0f}", "dim")
        lines = [utils, mems]
        if h >= 3:
            power = sum(g["power_w"] or 0.0 for g in rows)
            temps = [g["temp_c"] for g in rows if g["temp_c"] is not None]
            lines.append(
                Text(f"{power / 1000:.1f} kW · max {max(temps):.0f}°C" if temps else f"{power:.0f} W", style="dim")
            )
        return Text("\n").join(lines[:h])

    def _gpu_lines(self, g: dict[str, Any], per: int, w: int, history: list[Sample]) -> list[Text]:
        idx = g["index"]
        util_t = Text(f"{fmt.pct(g['util']):>4}", style=_util_style(g["util"]))
        used, total = g["mem_used"], g["mem_total"]
        mem = f"{fmt.gib(used)}/{fmt.gib(total)} GiB"
        power = f"{g['power_w']:.0f}" if g["power_w"] is not None else "N/A"
        plimit = f"/{g['power_limit_w']:.0f}" if g["power_limit_w"] is not None else ""
        temp = f"{g['temp_c']:.0f}°C" if g["temp_c"] is not None else "N/A"
        job = f"job {fmt.gib(g['proc_mem'])} GiB" if g["proc_mem"] is not None else "job N/A"
        name = str(g["name"] or "GPU").replace("NVIDIA ", "")

        def spark(room: int, field: str = "util") -> Text:
            room = max(0, room)
            vals = [_gpu_field(ev, idx, field) for ev in history[-room:]] if room else []
            return Text(fmt.sparkline(vals, 100.0) if vals else "", style="green")

        if per == 1:
            line = Text.assemble(
                (f"{idx} ", "bold"), util_t, f" {fmt.gib(used, 0)}/{fmt.gib(total, 0)}G {power}W {temp}"
            )
            if line.cell_len + 3 <= w:
                line.append(" ")
                line.append_text(spark(w - line.cell_len))
            return [line]
        head = Text.assemble((f"{idx} ", "bold"), fmt.clip(name, max(4, w - 24)), f"  {temp}  {power}{plimit} W")
        if per == 2:
            l2 = Text.assemble("  ", util_t, " ", f"{mem} ", (job, "dim"))
            if l2.cell_len + 3 <= w:
                l2.append(" ")
                l2.append_text(spark(w - l2.cell_len))
            return [head, l2]
        l2 = Text.assemble("  util ", util_t, " ")
        l2.append_text(spark(w - l2.cell_len))
        mem_pct = used / total if isinstance(used, float) and isinstance(total, float) and total > 0 else None
        l3 = Text.assemble(
            "  mem  ", (f"{mem_pct * 100:3.0f}%" if mem_pct is not None else " N/A", "bold"), f" {mem}  ", (job, "dim")
        )
        return [head, l2, l3]


def _gpu_field(ev: Sample, index: int | None, name: str) -> float | None:
    for g in ev.gpus or ():
        if g.index == index:
            return num(getattr(g, name))
    return None


def _util_style(v: float | None) -> str:
    if v is None:
        return "dim"
    if v >= 80:
        return "bold green"
    if v >= 30:
        return "yellow"
    return "red"
