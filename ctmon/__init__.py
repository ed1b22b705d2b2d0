"""ctmon: a live terminal monitor for torch.compile workloads.

The only API a training script needs is :func:`step`, and only when the
automatic step detection (optimizer steps, calls of a compiled model) does not
fit the loop::

    import ctmon
    for batch in loader:
        ...
        ctmon.step()   # a no-op unless the script runs under ctmon

A job ctmon did not start (a SLURM task, a Kubernetes pod, a notebook) opts
in from inside with :func:`install` -- or by running with ``CTMON_INSTALL=1``
and importing ctmon -- and is then recorded and listed by ``ctmon watch``.

Importing ctmon is cheap: it pulls in neither torch nor the TUI.
"""

import os as _os

from ctmon._api import active, step

__version__ = "0.1.0"
__all__ = ["__version__", "active", "install", "step"]


def install(recording: "str | None" = None) -> "str | None":
    """Record this process from now on, as ``ctmon record`` would have.

    Returns the recording's path (``recording``, else one in ctmon's state
    directory), or None when the process is already monitored or monitoring
    could not start (one ``ctmon:`` line on stderr says why; the job runs on).
    """
    from ctmon._install import install as _install

    return _install(recording)


def _is_ctmon_itself() -> bool:
    """ctmon's own command line (the ``ctmon`` script, ``python -m ctmon``) imports ctmon too."""
    import sys

    argv = list(getattr(sys, "orig_argv", sys.argv))
    return _os.path.basename(sys.argv[0] if sys.argv else "") == "ctmon" or any(
        a == "-m" and b.split(".")[0] == "ctmon" for a, b in zip(argv, argv[1:], strict=False)
    )


if _os.environ.get("CTMON_INSTALL") == "1" and not _os.environ.get("CTMON_AGENT_SOCKET") and not _is_ctmon_itself():
    install(_os.environ.get("CTMON_RECORDING") or None)
