"""The method and its settings: a choice of method in words, and a form built from its config
dataclass (words, units, ranges and which setting matters when: :mod:`core.engine.settings_help`),
which keeps each method's values while another is chosen."""

from __future__ import annotations

import contextlib
from dataclasses import asdict
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QComboBox, QFormLayout, QGroupBox, QLabel, QScrollArea, QWidget

from app.views.training.fields import (
    WrappedLabel,
    changed_signal,
    form_label,
    make_setting_widget,
    set_widget_value,
    widget_value,
)
from core.engine.inference import METHODS, get_method
from core.engine.naming import METHOD_DESCRIPTIONS
from core.engine.settings_help import SettingHelp, method_settings
from core.engine.training_plan import small_folder_settings
from core.engine.training_words import method_about, method_item_text, small_folder_words

#: The settings of the best-weights training that a saved start replaces (methods with ``fit_from``).
BEST_WEIGHTS_SETTINGS = ("epochs", "lr")


class MethodPanel(QObject):
    """Binds the chosen method and its settings both ways: :meth:`select_method` and
    :meth:`set_setting` show values, :meth:`setting_values` and :meth:`config` read them.

    Signals
    -------
    method_changed
        Another method was chosen (its form is built).
    setting_changed
        A setting of the chosen method changed.
    """

    method_changed = Signal()
    setting_changed = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.setting_widgets: dict[str, QWidget] = {}
        self._setting_help: dict[str, SettingHelp] = {}
        self._current = ""
        #: Values typed per method, so that switching methods and back keeps them.
        self.values: dict[str, dict[str, Any]] = {}
        self._best_weights_given = False
        #: Per method, the settings :meth:`fit_to_images` chose for a small folder (to undo them).
        self._fitted: dict[str, dict[str, int]] = {}

        self.method = QComboBox()
        for name in METHODS:  # the registry's order
            self.method.addItem(method_item_text(name), name)
            self.method.setItemData(self.method.count() - 1, METHOD_DESCRIPTIONS.get(name, ""),
                                    Qt.ItemDataRole.ToolTipRole)
        self.method.setToolTip("The inference method: how the spread of belief over the weights is found.")
        self.method_about = WrappedLabel()
        self.method_about.setStyleSheet("color: #555555;")  # a quieter grey than the labels
        self.settings_form = QFormLayout()
        box = QGroupBox("Method settings")
        box.setLayout(self.settings_form)
        self.scroll = QScrollArea(widgetResizable=True)
        self.scroll.setWidget(box)
        self.method.currentIndexChanged.connect(self._on_method_changed)

    def add_rows(self, form: QFormLayout) -> None:
        """The method's rows of the dialog's form."""
        form.addRow(form_label("Method", self.method.toolTip()), self.method)
        form.addRow("", self.method_about)

    @property
    def method_name(self) -> str:
        """The internal name of the chosen method (its registry key)."""
        return self.method.currentData()

    def select_method(self, name: str) -> None:
        """Choose a method by its internal name."""
        index = self.method.findData(name)
        if index < 0:
            raise ValueError(f"unknown method {name!r}")
        self.method.setCurrentIndex(index)
        if self._current != name:  # chosen in the combo already, its form not built yet: no signal came
            self._on_method_changed()

    def set_setting(self, name: str, value: object) -> None:
        set_widget_value(self.setting_widgets[name], value)

    def setting_values(self) -> dict[str, Any]:
        return {key: widget_value(widget) for key, widget in self.setting_widgets.items()}

    def config(self) -> Any:
        """The method's config from the form (``ValueError`` when settings do not fit together)."""
        return get_method(self.method_name).make_config(**self.setting_values())

    def fit_to_images(self, num_train: int | None) -> str:
        """Give the chosen method the steps that ``num_train`` images need
        (:func:`~core.engine.training_plan.small_folder_settings`; None: MNIST, the defaults back).

        Settings the person changed are kept: only those still at the method's default, or at the
        value this set before, change. Returns the sentence that says what changed (or empty).
        """
        method = get_method(self.method_name)
        defaults = asdict(method.make_config())
        values = self.setting_values()
        before = self._fitted.get(self.method_name, {})
        untouched = {k for k, v in values.items() if v == defaults.get(k) or before.get(k, object()) == v}
        chosen = set(values) - untouched
        try:  # the method's defaults for the settings not chosen, the person's for the rest
            base = method.make_config(**{k: defaults[k] if k in untouched else v for k, v in values.items()})
        except (ValueError, TypeError):
            return ""  # settings that do not fit together: the estimate says so, nothing is changed
        changes = small_folder_settings(base, num_train, chosen) if num_train else {}
        for key in untouched & (set(before) | set(changes)):
            self.set_setting(key, changes.get(key, defaults[key]))
        self._fitted[self.method_name] = changes
        return small_folder_words(changes, num_train) if num_train else ""

    def values_to_remember(self, name: str) -> dict[str, Any]:
        """Method ``name``'s values as the person set them: a setting :meth:`fit_to_images` chose
        and nobody changed is remembered at its default, so that the next folder is fitted afresh."""
        values = dict(self.values.get(name, {}))
        fitted = self._fitted.get(name, {})
        if fitted:
            defaults = asdict(get_method(name).make_config())
            for key, value in fitted.items():
                if key in values and values[key] == value:
                    values[key] = defaults[key]
        return values

    def is_setting_shown(self, name: str) -> bool:
        """Whether setting ``name`` has a visible row for the chosen method and model."""
        widget = self.setting_widgets.get(name)
        return widget is not None and self.settings_form.isRowVisible(widget)

    def stash(self) -> None:
        """Keep the chosen method's values (to show again when it is chosen again, and to save)."""
        if self._current:
            self.values[self._current] = self.setting_values()

    def show_best_weights_given(self, given: bool) -> None:
        """Hide the best-weights training's settings while a saved start replaces that phase."""
        self._best_weights_given = given
        self.update_rows()

    def update_rows(self) -> None:
        """Show only the settings that apply: a setting that depends on another only when that
        one has the value it needs."""
        for key, widget in self.setting_widgets.items():
            condition = self._setting_help[key].shown_when
            visible = not (key in BEST_WEIGHTS_SETTINGS and self._best_weights_given)
            if condition is not None:
                other, wanted = condition
                visible = visible and other in self.setting_widgets and widget_value(self.setting_widgets[other]) == wanted
            self.settings_form.setRowVisible(widget, visible)

    def _on_method_changed(self, *_: object) -> None:
        """Rebuild the settings form from the method's config, with values typed before."""
        self.stash()
        name = self.method_name
        self._current = name
        while self.settings_form.rowCount():
            self.settings_form.removeRow(0)
        self.setting_widgets.clear()
        self._setting_help.clear()
        stored = self.values.get(name, {})
        shown_advanced_title = False
        for key, default, help_ in method_settings(name):
            widget = make_setting_widget(name, key, default, help_)
            if key in stored:
                # A stored value an older version wrote may not fit: the default stays.
                with contextlib.suppress(ValueError, TypeError):
                    set_widget_value(widget, stored[key])
            if help_.advanced and not shown_advanced_title:
                self.settings_form.addRow(QLabel("<b>Fine-tuning</b> (most runs leave these alone)"))
                shown_advanced_title = True
            self.setting_widgets[key] = widget
            self._setting_help[key] = help_
            self.settings_form.addRow(form_label(help_.label, widget.toolTip()), widget)
            changed_signal(widget).connect(self._on_setting_changed)
        self.method_about.setText(method_about(name))
        self.update_rows()
        self.method_changed.emit()

    def _on_setting_changed(self, *_: object) -> None:
        self.update_rows()
        self.setting_changed.emit()
