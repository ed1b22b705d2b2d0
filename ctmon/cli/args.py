"""Argument parsing for the launching commands (attach, record).

Options come before the target; everything after SCRIPT (or ``-m MODULE``)
belongs to the job, exactly as with ``python``. ``--`` ends ctmon's options.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ctmon.launch.spec import JobSpec, UsageError, check_module, check_script, check_torch, command_path


@dataclass
class OptionSpec:
    names: tuple[str, ...]
    dest: str
    takes_value: bool = False
    repeat: bool = False
    help: str = ""
    metavar: str = "VALUE"


@dataclass
class Parsed:
    values: dict[str, object] = field(default_factory=dict)
    spec: JobSpec | None = None
    help: bool = False

    def text(self, dest: str) -> str | None:
        """An option that takes one value (None when not given)."""
        v = self.values.get(dest)
        return v if isinstance(v, str) else None

    def texts(self, dest: str) -> list[str]:
        """A repeatable option's values, in order."""
        v = self.values.get(dest)
        return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []

    def flag(self, dest: str) -> bool:
        return self.values.get(dest) is True


def parse_launch(prog: str, argv: list[str], options: list[OptionSpec]) -> Parsed:
    by_name = {n: o for o in options for n in o.names}
    out = Parsed()
    for o in options:
        out.values[o.dest] = [] if o.repeat else (None if o.takes_value else False)
    i = 0
    target: tuple[str, str] | None = None
    rest: list[str] = []
    while i < len(argv):
        a = argv[i]
        if a == "--":
            if i + 1 >= len(argv):
                raise UsageError(f"{prog}: a script or -m MODULE is required after --")
            target, rest = ("script", argv[i + 1]), argv[i + 2 :]
            break
        if a in ("-h", "--help"):
            out.help = True
            return out
        if a == "-m" or (a.startswith("-m") and not a.startswith("--")):
            name = a[2:] if len(a) > 2 else (argv[i + 1] if i + 1 < len(argv) else None)
            if not name:
                raise UsageError(f"{prog}: -m needs a module name")
            target = ("module", name)
            rest = argv[i + 1 :] if len(a) > 2 else argv[i + 2 :]
            break
        if a.startswith("-") and a != "-":
            key, eq, inline = a.partition("=")
            opt = by_name.get(key)
            if opt is None:
                raise UsageError(f"{prog}: unknown option {key} (try: ctmon {prog} --help)")
            if opt.takes_value:
                if eq:
                    val = inline
                elif i + 1 < len(argv):
                    i += 1
                    val = argv[i]
                else:
                    raise UsageError(f"{prog}: {key} needs a value")
                if opt.repeat:
                    out.values[opt.dest] = [*out.texts(opt.dest), val]
                else:
                    out.values[opt.dest] = val
            else:
                if eq:
                    raise UsageError(f"{prog}: {key} takes no value")
                out.values[opt.dest] = True
            i += 1
            continue
        target, rest = ("script", a), argv[i + 1 :]
        break
    if out.values.get("pid") is not None:
        if target is not None:
            raise UsageError(f"{prog}: --pid joins a running process: give it no script or module")
        return out  # a running process, no job to start (ctmon/cli/join_pid.py)
    if target is None:
        raise UsageError(f"{prog}: a script or -m MODULE is required (ctmon {prog} [options] SCRIPT [ARGS...])")
    mode, name = target
    cwd = os.getcwd()
    if mode == "script" and not os.path.isfile(name) and (program := command_path(name)) is not None:
        mode, name = "command", program  # a launcher: torchrun, accelerate launch, deepspeed, a shell script
    elif mode == "script" and os.path.isfile(name) and _is_program(name):
        mode, name = "command", os.path.abspath(name)
    if mode == "script":
        check_script(name)
    elif mode == "module":
        check_module(name, cwd)
    check_torch()
    out.spec = JobSpec(mode=mode, target=name, args=list(rest), cwd=cwd)
    return out


def _is_program(path: str) -> bool:
    """An executable file that is not Python source: ./launch.sh, a built binary."""
    if path.endswith((".py", ".pyw", ".pyz")) or not os.access(path, os.X_OK):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(128)
    except OSError:
        return False
    return not (head.startswith(b"#!") and b"python" in head.split(b"\n", 1)[0])


HELP_WIDTH = 100  # a help screen's lines, wrapped (an 80-column terminal wraps the rest itself)


def format_help(usage: str, description: str, options: list[OptionSpec]) -> str:
    import textwrap

    text = "\n".join(textwrap.fill(para, HELP_WIDTH) for para in description.split("\n"))
    lines = [f"usage: {usage}", "", text, "", "options:"]
    for o in options:
        names = ", ".join(o.names) + (f" {o.metavar}" if o.takes_value else "")
        lines.append(textwrap.fill(o.help, HELP_WIDTH, initial_indent=f"  {names:<26} ", subsequent_indent=" " * 29))
    lines.append(f"  {'-h, --help':<26} show this help and exit")
    return "\n".join(lines) + "\n"
