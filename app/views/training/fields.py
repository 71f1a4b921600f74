"""The training dialog's fields: one widget per method setting (check box, combo box, spin box)
with its tooltip, read and written as typed values, and the labels and rows the panels share."""

from __future__ import annotations

import html
import math
import re
from typing import Any

from PySide6.QtGui import QValidator
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)

from core.engine.settings_help import SettingHelp, setting_choices, unit_for
from core.engine.training_words import number_text


class ScientificSpinBox(QDoubleSpinBox):
    """A spin box for numbers spanning decades (step sizes, learning rates).

    Shows four significant digits (``5e-7``), accepts typed scientific notation, and the
    arrows move along 1, 2, 5, 10, 20, ... so that each click is a sensible change.
    """

    _PARTIAL = re.compile(r"^[+-]?(\d*\.?\d*)?([eE][+-]?\d*)?$")

    def __init__(self, minimum: float, maximum: float, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # Enough decimals that values down to 1e-12 keep their significant digits.
        self.setDecimals(20)
        self.setRange(minimum, maximum)

    def textFromValue(self, value: float) -> str:  # noqa: N802 (Qt override)
        return number_text(value)

    def valueFromText(self, text: str) -> float:  # noqa: N802 (Qt override)
        try:
            return float(text)
        except ValueError:
            return self.value()

    def validate(self, text: str, pos: int) -> object:
        stripped = text.strip()
        try:
            value = float(stripped)
        except ValueError:
            state = (
                QValidator.State.Intermediate
                if self._PARTIAL.match(stripped)
                else QValidator.State.Invalid
            )
            return state, text, pos
        if self.minimum() <= value <= self.maximum():
            return QValidator.State.Acceptable, text, pos
        return QValidator.State.Intermediate, text, pos

    def fixup(self, text: str) -> str:
        return number_text(self.value())

    def stepBy(self, steps: int) -> None:  # noqa: N802 (Qt override)
        value = self.value()
        for _ in range(abs(steps)):
            value = self._next_on_grid(value, up=steps > 0)
        self.setValue(min(max(value, self.minimum()), self.maximum()))

    def _next_on_grid(self, value: float, up: bool) -> float:
        if value <= 0:
            return max(self.minimum(), 1e-6) if up else 0.0
        exponent = math.floor(math.log10(value))
        grid = [m * 10.0**e for e in (exponent - 1, exponent, exponent + 1) for m in (1, 2, 5)]
        if up:
            return min(g for g in grid if g > value * (1 + 1e-9))
        below = [g for g in grid if g < value * (1 - 1e-9)]
        return max(below) if below else value / 2


class WrappedLabel(QLabel):
    """A word-wrapped label as tall as its text at its width: a form sizes a plain one by the
    height its text takes at a narrow guessed width, which left blank lines around a long
    found-summary."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setWordWrap(True)

    def sizeHint(self) -> Any:  # noqa: N802 (Qt override)
        hint = super().sizeHint()
        if self.width() > 0:
            hint.setHeight(self.heightForWidth(self.width()))
        return hint

    def resizeEvent(self, event: Any) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        self.updateGeometry()


def form_label(text: str, tooltip: str) -> QLabel:
    """A form row's label, with the tooltip of its field."""
    label = QLabel(text)
    label.setToolTip(tooltip)
    return label


def browse_row(edit: QLineEdit, tip: str, slot: Any) -> QWidget:
    """A path field with its Browse… button beside it, as one row."""
    browse = QPushButton("Browse…")
    browse.setToolTip(tip)
    browse.clicked.connect(slot)
    row = QWidget()
    layout = QHBoxLayout(row)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.addWidget(edit, 1)
    layout.addWidget(browse)
    return row


def _tooltip(help_: SettingHelp, default: Any, choices: dict[str, str] | None) -> str:
    """Rich text (so Qt wraps it): what the setting does, its unit and its default."""
    if isinstance(default, bool):
        default_words = "on" if default else "off"
    elif choices is not None:
        default_words = choices.get(default, str(default))
    elif isinstance(default, float):
        default_words = number_text(default)
    else:
        default_words = str(default)
    if help_.special and default == help_.minimum:
        default_words = help_.special
    facts = []
    if help_.unit:
        facts.append(f"<i>Unit:</i> {html.escape(help_.unit)}")
    facts.append(f"<i>Default:</i> {html.escape(default_words)}")
    return f"<p>{html.escape(help_.tooltip)}</p><p>{' · '.join(facts)}</p>"


def follow_count(widget: QSpinBox | QDoubleSpinBox, unit: str) -> None:
    """Show the unit after the number, singular for 1 (“1 chain”, “4 chains”)."""

    def update(value: float) -> None:
        widget.setSuffix(f" {unit_for(value, unit)}")

    widget.valueChanged.connect(update)
    update(widget.value())


def make_setting_widget(method: str, name: str, default: Any, help_: SettingHelp) -> QWidget:
    """A check box, combo box or spin box for one setting, with its tooltip."""
    choices = setting_choices(method, name)
    widget: QWidget
    if isinstance(default, bool):
        widget = QCheckBox()
    elif choices is not None:
        widget = QComboBox()
        for value, words in choices.items():
            widget.addItem(words, value)
    elif isinstance(default, int):
        widget = QSpinBox()
        widget.setRange(int(help_.minimum), int(min(help_.maximum, 2**31 - 1)))
        if help_.unit:
            follow_count(widget, help_.unit)
        if help_.special:
            widget.setSpecialValueText(help_.special)
    elif isinstance(default, float) and help_.log_scale:
        widget = ScientificSpinBox(help_.minimum, help_.maximum)
    elif isinstance(default, float):
        widget = QDoubleSpinBox()
        widget.setDecimals(help_.decimals)
        widget.setRange(help_.minimum, help_.maximum)
        widget.setSingleStep(10.0 ** -help_.decimals * (5 if help_.decimals >= 2 else 1))
        if help_.unit:
            follow_count(widget, help_.unit)
    else:
        widget = QLineEdit()
    widget.setToolTip(_tooltip(help_, default, choices))
    set_widget_value(widget, default)
    return widget


def widget_value(widget: QWidget) -> Any:
    """The typed value a setting widget holds."""
    if isinstance(widget, QCheckBox):
        return widget.isChecked()
    if isinstance(widget, QComboBox):
        return widget.currentData()
    if isinstance(widget, QSpinBox):
        return int(widget.value())
    if isinstance(widget, QDoubleSpinBox):
        return float(widget.value())
    return widget.text()  # type: ignore[attr-defined]


def set_widget_value(widget: QWidget, value: Any) -> None:
    """Show ``value`` (typed, or text as stored by QSettings) in a setting widget."""
    if isinstance(widget, QCheckBox):
        widget.setChecked(value is True or str(value).lower() in ("true", "1", "yes", "on"))
    elif isinstance(widget, QComboBox):
        index = widget.findData(value)
        if index < 0:
            raise ValueError(f"{value!r} is not one of the choices")
        widget.setCurrentIndex(index)
    elif isinstance(widget, QSpinBox):
        widget.setValue(int(float(value)))
    elif isinstance(widget, QDoubleSpinBox):
        widget.setValue(float(value))
    else:
        widget.setText(str(value))  # type: ignore[attr-defined]


def changed_signal(widget: QWidget) -> Any:
    """The signal a setting widget sends when its value changes."""
    if isinstance(widget, QCheckBox):
        return widget.toggled
    if isinstance(widget, QComboBox):
        return widget.currentIndexChanged
    if isinstance(widget, (QSpinBox, QDoubleSpinBox)):
        return widget.valueChanged
    return widget.textChanged  # type: ignore[attr-defined]
