"""The workspace: one plain state object for what the person is looking at.

It holds the input every column judges (a 28×28 model input and a words label), the ordered
columns (a posterior each, with its title) and the latest prediction per column. Views render
it and ask it to change; they hold no numbers of their own (napari's layer list plays the same
role for its canvas).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PySide6.QtCore import QObject, Signal

from core.inference.base import Posterior
from core.io import load_posterior
from core.naming import posterior_title, samples_used
from core.predictive import Prediction

DIGITS = tuple("0123456789")


@dataclass
class Column:
    """One posterior shown as a column; ``key`` is its resolved file path (never shown)."""

    key: str
    posterior: Posterior
    prediction: Prediction | None = None
    sweep: object | None = None  # core.metrics.RotationSweep of the last sweep, if any
    extra: dict = field(default_factory=dict)

    @property
    def source(self) -> Path:
        return Path(self.key)

    def samples(self, requested: int) -> int:
        return samples_used(self.posterior, requested)

    def title(self, requested: int) -> str:
        return posterior_title(self.posterior, self.samples(requested))


class Workspace(QObject):
    """Signals
    -------
    columns_changed
        A column was added, removed or moved.
    input_changed
        The input changed (``image`` may be None: nothing to judge).
    prediction_changed(str)
        A column's prediction changed (the column key).
    settings_changed
        Number of samples or interval level changed.
    """

    columns_changed = Signal()
    input_changed = Signal()
    prediction_changed = Signal(str)
    settings_changed = Signal()

    MAX_COLUMNS = 6

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.columns: list[Column] = []
        self.image: np.ndarray | None = None
        self.input_label = ""
        self.class_names: tuple[str, ...] = DIGITS
        self.num_samples = 100
        self.level = 0.9

    # ------------------------------------------------------------------ columns
    def column(self, key: str) -> Column | None:
        return next((c for c in self.columns if c.key == key), None)

    def keys(self) -> list[str]:
        return [c.key for c in self.columns]

    def add_posterior(self, path: str | Path) -> Column:
        """Load a posterior file and append it as a column (once: a second add returns the first).

        Raises ``PosteriorFileError`` for a file that cannot be used and ``ValueError`` when
        the workspace is full or the posterior has other classes than the columns shown.
        """
        key = str(Path(path).expanduser().resolve())
        existing = self.column(key)
        if existing is not None:
            return existing
        if len(self.columns) >= self.MAX_COLUMNS:
            raise ValueError(f"At most {self.MAX_COLUMNS} posteriors fit side by side: remove one first.")
        posterior = load_posterior(key)
        if self.columns and posterior.num_classes != len(self.class_names):
            raise ValueError(
                f"This posterior tells {posterior.num_classes} classes apart, the columns shown tell "
                f"{len(self.class_names)}: remove them first to compare it with others."
            )
        if not self.columns:
            self.class_names = DIGITS if posterior.num_classes == 10 else tuple(str(k) for k in range(posterior.num_classes))
        column = Column(key, posterior)
        self.columns.append(column)
        self.columns_changed.emit()
        return column

    def remove(self, key: str) -> None:
        self.columns = [c for c in self.columns if c.key != key]
        self.columns_changed.emit()

    def move(self, key: str, offset: int) -> None:
        """Move a column ``offset`` places to the right (negative: left), clamped to the ends."""
        index = self.keys().index(key)
        target = min(max(index + offset, 0), len(self.columns) - 1)
        if target != index:
            self.columns.insert(target, self.columns.pop(index))
            self.columns_changed.emit()

    # -------------------------------------------------------------------- input
    def set_input(self, image: np.ndarray | None, label: str = "") -> None:
        """Set the 28×28 model input every column judges (None: nothing to judge)."""
        self.image = None if image is None else np.asarray(image, dtype=np.float32)
        self.input_label = label
        if image is None:
            for column in self.columns:
                column.prediction = None
        self.input_changed.emit()

    def set_prediction(self, key: str, prediction: Prediction | None) -> None:
        column = self.column(key)
        if column is not None:
            column.prediction = prediction
            self.prediction_changed.emit(key)

    def set_sampling(self, num_samples: int | None = None, level: float | None = None) -> None:
        if num_samples is not None:
            self.num_samples = int(num_samples)
        if level is not None:
            self.level = float(level)
        self.settings_changed.emit()
