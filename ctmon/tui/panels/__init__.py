"""The summary panels: header, steps, GPU, process, compilation, alerts.

A module per panel; ``base`` holds the ``Panel`` base class and the text
helpers they share, ``samples`` the readers of resource samples,
``findings`` how the findings are computed and shown.

Each panel renders from a ``ViewContext`` and says which store sections it
depends on (``SECTIONS``); the app calls ``update_view`` only when one of
those sections' revision changed, so an idle screen repaints nothing.
Colour is never the only signal: compile-paying steps carry a ``!`` mark,
alerts and states carry words.
"""

from ctmon.tui.panels.alerting import ALERTS_KEPT, AlertsPanel, alert_text, alerts, is_alert
from ctmon.tui.panels.base import Panel, localize
from ctmon.tui.panels.compilation import CompilePanel
from ctmon.tui.panels.findings import current_findings, finding_text, findings_body, live_findings
from ctmon.tui.panels.gpu import GpuPanel
from ctmon.tui.panels.header import STATE_STYLE, HeaderBar, device_summary, state_text
from ctmon.tui.panels.keybar import KeyBar
from ctmon.tui.panels.process import ProcessPanel
from ctmon.tui.panels.samples import gpu_error, latest_gpus, recent_samples
from ctmon.tui.panels.steps import STATS_WINDOW, StepsPanel

__all__ = [
    "ALERTS_KEPT",
    "STATE_STYLE",
    "STATS_WINDOW",
    "AlertsPanel",
    "CompilePanel",
    "GpuPanel",
    "HeaderBar",
    "KeyBar",
    "Panel",
    "ProcessPanel",
    "StepsPanel",
    "alert_text",
    "alerts",
    "current_findings",
    "device_summary",
    "finding_text",
    "findings_body",
    "gpu_error",
    "is_alert",
    "latest_gpus",
    "live_findings",
    "localize",
    "recent_samples",
    "state_text",
]
