"""Every method setting in words, as a settings form asks for them: a setting's
:class:`~core.engine.setting_words.SettingHelp` (a method's own words,
:mod:`core.engine.method_setting_words`, before the shared ones, :mod:`core.engine.setting_words`,
or words made from its name), the choices of a choice setting, a method's settings in the order
a form lists them, units in the singular, and an error message with setting names in words.
"""

from __future__ import annotations

import re
import typing
from dataclasses import fields
from typing import Any, Literal

from core.engine.inference import get_method
from core.engine.method_setting_words import PER_METHOD
from core.engine.setting_words import COMMON, SettingHelp

#: The singular of each unit, for a count of one.
SINGULAR_UNITS: dict[str, str] = {
    "passes": "pass",
    "images": "image",
    "steps": "step",
    "chains": "chain",
    "draws": "draw",
    "iterations": "iteration",
    "networks": "network",
    "directions": "direction",
    "components": "component",
    "units": "unit",
    "snapshots": "snapshot",
}


def unit_for(count: float, unit: str) -> str:
    """``unit_for(1, "passes")`` → ``"pass"``; other counts keep the plural."""
    return SINGULAR_UNITS.get(unit, unit) if count == 1 else unit


def has_own_words(method: str, name: str) -> bool:
    """Whether setting ``name`` of ``method`` has words written for it (not derived)."""
    return (method, name) in PER_METHOD or name in COMMON


def setting_help(method: str, name: str) -> SettingHelp:
    """How to show setting ``name`` of ``method``; words derived from the name if unknown."""
    found = PER_METHOD.get((method, name)) or COMMON.get(name)
    if found is None:
        # A setting added to a config without help here still shows, in plain words.
        words = name.replace("_", " ")
        return SettingHelp(words[:1].upper() + words[1:], f"The method's {words!r} setting.")
    return found


def setting_choices(method: str, name: str) -> dict[str, str] | None:
    """Value → words for a choice setting (a ``Literal`` field or one with listed choices)."""
    help_ = setting_help(method, name)
    hint = typing.get_type_hints(get_method(method).config_cls).get(name)
    values: tuple[Any, ...] = ()
    if typing.get_origin(hint) is Literal:
        values = typing.get_args(hint)
    if help_.choices is not None:
        allowed = tuple(help_.choices) if not values else tuple(v for v in values if v in help_.choices)
        return {v: help_.choices[v] for v in allowed}
    if values:
        return {v: str(v).replace("_", " ") for v in values}
    return None


def method_settings(method: str) -> list[tuple[str, Any, SettingHelp]]:
    """(name, default, help) of every setting of ``method``: main ones first, then advanced."""
    cls = get_method(method).config_cls
    rows = [(f.name, f.default, setting_help(method, f.name)) for f in fields(cls)]
    return sorted(rows, key=lambda row: row[2].advanced)  # stable: declaration order within


def in_words(method: str, message: str) -> str:
    """Replace setting names in an error message by their labels in quotes."""
    names = sorted((f.name for f in fields(get_method(method).config_cls)), key=len, reverse=True)
    for name in names:
        label = setting_help(method, name).label
        message = re.sub(rf"\b{re.escape(name)}\b", f"“{label.lower()}”", message)
    return message
