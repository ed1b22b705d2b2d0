"""The ``ctmon`` command line.

Exit codes: the job's own exit code for attach/record (or its signal); 0 for
success otherwise; 2 for bad usage or unreadable input (one line on stderr,
never a traceback); 3 when a ``--fail-on`` budget is broken.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import ctmon

USAGE = """usage: ctmon <command> [options] ...

Live monitor for torch.compile workloads.

commands:
  attach  [opts] SCRIPT|-m MODULE [ARGS...]   run a job with the live TUI
  record  [opts] SCRIPT|-m MODULE [ARGS...]   run a job headless, recording its events
  replay  FILE                                open the TUI on a recording (or a TORCH_TRACE dir)
  report  FILE [--json|--md]                  summarise a recording (or a TORCH_TRACE dir)
  diff    BASE NEW [--json|--md] [--fail]     what changed between two runs (regressions first)
  export  --perfetto|--svg FILE -o OUT        the run as a timeline (Perfetto, chrome://tracing)
  bench   [opts] SCRIPT|-m MODULE [ARGS...]   run a script once per torch.compile mode and compare
  runs    [--keep N | --older-than AGE]       list (and prune) the recordings ctmon keeps
  watch   [PID]                               list this user's live jobs, attach to one

Run 'ctmon <command> --help' for a command's options.
"""


class CliError(Exception):
    """A one-line error for the user; exit status 2 unless given."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


COMMANDS = ("attach", "record", "replay", "report", "diff", "export", "watch", "bench", "runs")
# ctmon's own requirements: a Python environment without one of them gets a
# line saying so, not a traceback.
REQUIREMENTS = ("msgspec", "numpy", "textual", "rich", "psutil", "prometheus_client")


def _command(name: str) -> Callable[[list[str]], int]:
    """Only the command asked for is imported (start-up time, and a job's
    missing torch is reported before anything heavier is needed)."""
    import importlib

    main: Callable[[list[str]], int] = importlib.import_module(f"ctmon.cli.{name}").main
    return main


def main(argv: list[str] | None = None) -> int:
    from ctmon.launch.stdfds import reserve

    reserve()  # before anything opens a file: no socket may land on fd 0-2
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(f"ctmon {ctmon.__version__}")
        return 0
    from ctmon.launch.runtime import RuntimeDirError
    from ctmon.launch.spec import UsageError
    from ctmon.wire.errors import RecordingError

    if args[0] not in COMMANDS:
        sys.stderr.write(_line(CliError(f"unknown command '{args[0]}' (commands: {', '.join(COMMANDS)})")))
        return 2
    try:
        return _command(args[0])(args[1:])
    except ModuleNotFoundError as e:
        if e.name not in REQUIREMENTS:
            raise
        sys.stderr.write(
            _line(
                CliError(
                    f"{e.name} is not installed in this Python environment ({sys.executable}); "
                    "install ctmon there with its requirements (pip install ctmon)"
                )
            )
        )
        return 2
    except (UsageError, RecordingError, RuntimeDirError) as e:
        sys.stderr.write(_line(e))
        return 2
    except CliError as e:
        sys.stderr.write(_line(e))
        return e.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def _line(error: Exception) -> str:
    """An error for the terminal: messages quote paths and arguments, which
    can hold escape sequences (a recording's file name)."""
    from ctmon.words.textsafe import clean

    return clean(f"ctmon: {error}\n")
