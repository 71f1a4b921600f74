"""The training dialog's fields kept between sessions (QSettings, group ``training``): the method
and each method's settings and drop rate, the network, the images, the seed and the name. The data
folder typed or browsed here becomes the app's one data folder."""

from __future__ import annotations

import contextlib
from pathlib import Path

from app import settings as app_settings
from app.views.training.fields import set_widget_value
from app.views.training.images_panel import ImagesPanel
from app.views.training.method_panel import MethodPanel
from app.views.training.network_panel import DEFAULT_MODEL, NetworkPanel
from app.views.training.run_panel import RunPanel
from core.engine.inference import DEFAULT_METHOD, METHODS
from core.engine.models import ARCHITECTURES

GROUP = "training"


def load(method: MethodPanel, network: NetworkPanel, images: ImagesPanel, run: RunPanel) -> None:
    """Show the stored fields (a value that cannot be read keeps the field's default)."""
    settings = app_settings.settings()
    settings.beginGroup(GROUP)
    try:
        settings.beginGroup("drop_rates")
        for name in settings.childKeys():
            with contextlib.suppress(ValueError, TypeError):
                network.drop_rates[name] = float(settings.value(name))
        settings.endGroup()
        settings.beginGroup("methods")
        for name in settings.childGroups():
            if name in METHODS:
                settings.beginGroup(name)
                method.values[name] = {k: settings.value(k) for k in settings.childKeys()}
                settings.endGroup()
        settings.endGroup()
        stored = settings.value("method")
        method.select_method(str(stored) if stored in METHODS else DEFAULT_METHOD)
        model = settings.value("model")
        network.select_model(str(model) if model in ARCHITECTURES else DEFAULT_MODEL)
        for widget, key in ((network.hidden, "hidden"), (run.seed, "seed"), (run.name, "name"),
                            (images.images_folder, "images_folder"), (images.images_source, "images")):
            value = settings.value(key)
            if value is not None:
                with contextlib.suppress(ValueError, TypeError):  # unreadable: default stays
                    set_widget_value(widget, value)
        with contextlib.suppress(ValueError, TypeError):  # stored as a number, 0 for the usual side
            set_widget_value(images.image_size, int(settings.value("image_size", 0)) or None)
    finally:
        settings.endGroup()


def save(method: MethodPanel, network: NetworkPanel, images: ImagesPanel, run: RunPanel) -> None:
    """Remember every field for the next dialog."""
    method.stash()
    network.stash()
    settings = app_settings.settings()
    settings.beginGroup(GROUP)
    settings.setValue("method", method.method_name)
    settings.setValue("model", network.model_name)
    settings.setValue("hidden", network.hidden.value())
    for name, rate in network.drop_rates.items():
        settings.setValue(f"drop_rates/{name}", rate)
    settings.setValue("seed", run.seed.value())
    settings.setValue("name", run.name.text())
    settings.setValue("images", images.images_source.currentData())
    settings.setValue("images_folder", images.images_folder.text().strip())
    settings.setValue("image_size", images.image_size.currentData() or 0)
    for name in method.values:
        for key, value in method.values_to_remember(name).items():  # a small folder's fitted steps: not kept
            settings.setValue(f"methods/{name}/{key}", value)
    settings.endGroup()
    settings.sync()
    text = images.data_dir.text().strip()
    if text and Path(text) != app_settings.data_folder():
        app_settings.set_data_folder(Path(text))
