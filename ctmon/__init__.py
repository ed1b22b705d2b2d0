"""ctmon: a live terminal monitor for torch.compile workloads.

The only API a training script needs is :func:`step`, and only when the
automatic step detection (optimizer steps, calls of a compiled model) does not
fit the loop::

    import ctmon
    for batch in loader:
        ...
        ctmon.step()   # a no-op unless the script runs under ctmon

Importing ctmon is cheap: it pulls in neither torch nor the TUI.
"""

from ctmon._api import active, step

__version__ = "0.1.0"
__all__ = ["__version__", "active", "step"]
