"""Every setting checked at start, each problem named by its setting with the values it allows.

A configuration mistake must never turn jupyter-suspend off silently (an idle
GPU that is never released). The server extension reads its traits with
:class:`CheckedConfigurable`: a value of the wrong type does not abort loading
(traitlets would raise on the first one, and jupyter_server would only log a
warning and run on without the extension: ``ExtensionManager.link_extension`` and
``load_extension`` catch every exception and log "error linking extension" / "extension failed
loading" at WARNING, jupyter_server 2.21 ``extension/manager.py``); it is recorded as a
:class:`Problem` and the trait keeps its default. :func:`number_problems`
adds the values of the right type that make no sense (negative seconds, a
percentage above 100). With any problem the extension runs *misconfigured*
(``SuspendApp``): its REST API answers every call with 503 and the problems,
the idle policy never runs, the metric ``jupyter_suspend_misconfigured`` is 1,
and every problem is logged at ERROR.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from traitlets import Float, HasTraits, Integer, TraitError
from traitlets.config import Config, Configurable

#: The answer's ``reason`` (and the status bar's word) while misconfigured.
MISCONFIGURED = "Misconfigured"
#: Trait names (any class) whose value must be above 0: a repeating timer or a size limit of 0 makes no sense.
POSITIVE = re.compile(r"(_interval|_poll|tick_seconds|retry_seconds|max_bytes|max_body_bytes)$")
#: Trait names whose value is a percentage.
PERCENT = re.compile(r"_percent$")
_TRAIT_ERROR = re.compile(r"The '(\w+)' trait of an? (\w+) instance")


@dataclass(frozen=True)
class Problem:
    """One setting that is wrong: its full name (``Class.trait``) and what it allows."""

    setting: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"setting": self.setting, "message": self.message}


class CheckedConfigurable(Configurable):
    """Loads its configuration trait by trait: a bad value becomes a :class:`Problem` (in
    :attr:`config_problems`) and the trait keeps its default, instead of an exception that
    jupyter_server would turn into a warning and a server without jupyter-suspend."""

    @property
    def config_problems(self) -> list[Problem]:
        problems: list[Problem] = self.__dict__.setdefault("_config_problems", [])
        return problems

    def _load_config(self, cfg: Config, section_names: list[str] | None = None, traits: Any = None) -> None:
        try:
            super()._load_config(cfg, section_names, traits)
            return
        except TraitError:
            pass  # traitlets rolled the whole section back: load it again, one trait at a time
        all_traits = self.traits(config=True) if traits is None else traits
        for name, value in self._find_my_config(cfg).items():
            if name not in all_traits:
                continue
            try:
                super()._load_config(Config({type(self).__name__: {name: value}}), None, {name: all_traits[name]})
            except TraitError as exc:
                setting = f"{type(self).__name__}.{name}"
                problem = Problem(setting, f"{exc} (the default {all_traits[name].default()!r} is kept)")
                if all(p.setting != setting for p in self.config_problems):
                    self.config_problems.append(problem)


def number_problems(obj: HasTraits, names: Iterable[str] | None = None) -> list[Problem]:
    """The configurable numbers of ``obj`` that are out of range: NaN, negative, 0 where a timer
    or a size needs more, a percentage outside 0..100."""
    problems = []
    traits = obj.traits(config=True)
    for name in sorted(traits if names is None else names):
        if not isinstance(traits[name], (Float, Integer)):
            continue
        value = getattr(obj, name)
        setting = f"{type(obj).__name__}.{name}"
        if value is None:
            continue
        if isinstance(value, float) and math.isnan(value):
            problems.append(Problem(setting, f"{value!r} is not a number; allowed: 0 or more"))
        elif POSITIVE.search(name) and value <= 0:
            problems.append(Problem(setting, f"{value!r} is not allowed; allowed: a number above 0"))
        elif value < 0:
            problems.append(Problem(setting, f"{value!r} is negative; allowed: 0 or more"))
        elif PERCENT.search(name) and value > 100:
            problems.append(Problem(setting, f"{value!r} is above 100; allowed: a percentage from 0 to 100"))
    return problems


def construction_problem(exc: Exception, fallback_setting: str) -> Problem:
    """A problem from an object that could not be made from its configuration (a backend):
    a TraitError names its trait; anything else is blamed on ``fallback_setting``."""
    match = _TRAIT_ERROR.search(str(exc)) if isinstance(exc, TraitError) else None
    setting = f"{match.group(2)}.{match.group(1)}" if match else fallback_setting
    return Problem(setting, str(exc) or type(exc).__name__)


def summary(problems: list[Problem]) -> str:
    """The one sentence of the 503 answer and of the ERROR log line."""
    names = ", ".join(sorted({p.setting for p in problems}))
    return (
        f"jupyter-suspend is misconfigured ({names}): suspend, resume and the idle policy are off "
        "until the configuration is fixed and the server restarted."
    )
