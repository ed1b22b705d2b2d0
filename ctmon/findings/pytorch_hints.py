"""Config settings in advice: the ones PyTorch's graph-break hints name, and
the ones ctmon suggests, checked against the settings in force in the job.

PyTorch's hints are quoted as PyTorch wrote them. A setting a hint names is
also given by its real name where the hint misspells it: GB0123's hint says
``torch._dynamo.trace_autograd_ops=True``, a name that does not exist; the
setting is ``torch._dynamo.config.trace_autograd_ops`` (GB9186's hint spells
it right). ``ALIASES`` holds such corrections; tests/test_findings_advice_breaks.py
checks each against torch's real config and the graph-break registry.

A setting ctmon would suggest that the job already has at that value is
never suggested: ``suggest`` says instead that it is on, and what it does not
cover. The settings in force come from the compiles behind a finding
(``CompileState.config_in_force``); a recording without them suggests as
before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctmon.findings.model import Fix, config_fix

if TYPE_CHECKING:
    from ctmon.store.compiles import ConfigValue

DYNAMO_CONFIG = "torch._dynamo.config"
INDUCTOR_CONFIG = "torch._inductor.config"
FUNCTORCH_CONFIG = "torch._functorch.config"

# Names PyTorch's hints write for a setting, and the setting's real name.
ALIASES = {
    "torch._dynamo.trace_autograd_ops": "torch._dynamo.config.trace_autograd_ops",  # GB0123 (torch 2.13)
}

_NAME = r"torch\.(?:_dynamo|_inductor|_functorch)(?:\.config)?\.\w+"
_VALUE = r"True|False|-?\d+"
# "Set torch._dynamo.config.allow_rnn=True", "`torch._dynamo.config.capture_scalar_outputs = True`"
_ASSIGN = re.compile(rf"`?(?P<name>{_NAME})`?\s*=\s*`?(?P<value>{_VALUE})\b")
# "Change `torch._dynamo.config.trace_autograd_ops` to `True`", "Set `torch._dynamo.config.trace_numpy` to True"
_CHANGE = re.compile(rf"`?(?P<name>{_NAME})`?\s+to\s+`?(?P<value>{_VALUE})\b")
_REAL = re.compile(r"^(?P<module>torch\.(?:_dynamo|_inductor|_functorch)\.config)\.(?P<key>\w+)$")


@dataclass(frozen=True)
class Setting:
    """A config setting to a value: ``torch._dynamo.config.<key> = <value>``."""

    key: str
    value: ConfigValue
    module: str = DYNAMO_CONFIG
    written: str | None = None  # the name as a hint wrote it, where that is not the real name

    @property
    def name(self) -> str:
        return f"{self.module}.{self.key}"

    @property
    def code(self) -> str:
        return f"{self.name} = {self.value!r}"

    @property
    def fix(self) -> Fix:
        return config_fix(self.module, self.key, self.value)


# The settings ctmon's own advice names.
CAPTURE_SCALARS = Setting("capture_scalar_outputs", True)
CAPTURE_DYNAMIC_SHAPES = Setting("capture_dynamic_output_shape_ops", True)
TRACE_AUTOGRAD = Setting("trace_autograd_ops", True)


def _value(text: str) -> ConfigValue:
    if text in ("True", "False"):
        return text == "True"
    return int(text)


def _resolve(written: str, value: str) -> Setting | None:
    """The setting a hint's name stands for: a real config name, or a known
    misspelling of one. A name that is neither (a function, such as
    ``torch._dynamo.allow_c_slot``, or an unknown name) is no setting."""
    real = ALIASES.get(written, written)
    m = _REAL.match(real)
    if m is None:
        return None
    return Setting(m.group("key"), _value(value), m.group("module"), written if real != written else None)


def hint_settings(hints: Iterable[str]) -> list[Setting]:
    """The settings PyTorch's hints tell the user to make, in order, once each."""
    out: list[Setting] = []
    for hint in hints:
        for pattern in (_ASSIGN, _CHANGE):
            for m in pattern.finditer(hint):
                s = _resolve(m.group("name"), m.group("value"))
                if s is not None and all(s.name != o.name for o in out):
                    out.append(s)
    return out


def already_set(setting: Setting, config: Mapping[str, ConfigValue]) -> bool:
    """Whether the job's compiles already have ``setting`` at its value."""
    if setting.module != DYNAMO_CONFIG or setting.key not in config:
        return False
    have = config[setting.key]
    return isinstance(have, bool) == isinstance(setting.value, bool) and have == setting.value


# Settings a hint may name that are not a fix: they show errors, or hide them.
NOT_FIXES = frozenset({"verbose", "suppress_errors"})


def setting_fixes(settings: Iterable[Setting], config: Mapping[str, ConfigValue]) -> list[Fix]:
    """The settings as fixes, once each, leaving out those the job already has
    (a fix never asks for a setting already on) and those that are no fix."""
    out: list[Fix] = []
    for s in settings:
        if s.key in NOT_FIXES or s.key.startswith(("_", "debug")) or already_set(s, config) or s.fix in out:
            continue
        out.append(s.fix)
    return out


def is_on(setting: Setting) -> str:
    """'capture_scalar_outputs is already True in this job'."""
    return f"{setting.key} is already {setting.value!r} in this job"


def suggest(
    setting: Setting,
    config: Mapping[str, ConfigValue],
    *,
    lead: str = "Set ",
    why: str = "",
    not_covering: str | None = None,
) -> str:
    """ctmon's advice to make a setting, as one sentence: ``lead`` + "set X =
    V" + ``why``; where the job already has it, the sentence saying so and
    what it does not cover (``not_covering``) instead."""
    if already_set(setting, config):
        tail = f"; it does not cover {not_covering}" if not_covering else ", so it is not what stops this"
        return f"{is_on(setting)}{tail}."
    return f"{lead}{setting.code}{why}."


def quote(
    gb_id: str | None,
    url: str | None,
    explanation: str | None,
    hints: list[str],
    config: Mapping[str, ConfigValue],
) -> str:
    """PyTorch's explanation and hints for one kind of graph break, verbatim,
    with its graph-break id and page; then the real name of a setting a hint
    misspells, and a setting a hint names that the job already has."""
    parts = [_sentence(x) for x in (explanation, *(f"Hint: {h.strip()}" for h in hints if h.strip())) if x]
    if not parts:
        return ""  # no words from PyTorch: its page is in the finding's evidence
    for s in hint_settings(hints):
        if s.written:
            parts.append(f"(In full: {s.code}.)")
        if already_set(s, config):
            parts.append(f"({is_on(s)}.)")
    if url:
        parts.append(f"See {url}")
    head = f"PyTorch ({gb_id.upper()}):" if gb_id else "PyTorch:"
    return " ".join([head, *parts])


def _sentence(text: str) -> str:
    text = " ".join(text.split())  # PyTorch's text wraps and indents its lines
    return text if text.endswith((".", "!", "?", ":")) else text + "."
