"""torch.compile's modes as ``ctmon bench`` runs and names them.

``bench`` runs one recording per mode and names each file by its mode
(``default.jsonl``); a reader that is handed such a directory tells it apart
by those names (ctmon/read/torch_trace.py).
"""

from __future__ import annotations

MODES = ("eager", "default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
