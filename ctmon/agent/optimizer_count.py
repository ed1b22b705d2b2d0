"""An optimizer's own count of its steps, read without a GPU sync."""

from __future__ import annotations

from typing import Any


def optimizer_step_count(optimizer: Any) -> int | None:
    """The optimizer's own count of its steps, as most keep it (Adam's,
    AdamW's, RMSprop's ``state[param]["step"]``): where it is a number or a
    tensor on the CPU (one on the GPU would cost a sync to read). None where
    it keeps none (SGD) or has not stepped yet."""
    try:
        state = optimizer.state
        for group in optimizer.param_groups:
            for param in group["params"]:
                kept = state.get(param)
                if not kept:
                    continue
                step = kept.get("step")
                if isinstance(step, (int, float)) and not isinstance(step, bool):
                    return int(step)
                device = getattr(step, "device", None)
                if type(step).__name__ == "Tensor" and getattr(device, "type", None) == "cpu" and step.numel() == 1:
                    return int(step.item())
                return None
    except Exception:
        return None  # an optimizer of its own kind: the count is ctmon's
    return None
