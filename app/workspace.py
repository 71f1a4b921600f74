"""The workspace: one plain state object for what the person is looking at.

It holds the input every column judges (a 28×28 model input, a face descriptor or a photo of
one's own, and a words label), the ordered columns (a posterior each, with its title) and the
latest prediction per column. Views render it and ask it to change; they hold no numbers of
their own (napari's layer list plays the same role for its canvas).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QObject, Signal

from core.engine.naming import posterior_title, samples_used

if TYPE_CHECKING:  # the window is built before the engine (torch) loads: see app.__main__
    from core.analysis.predictive import Prediction
    from core.engine.inference.base import Posterior
    from core.engine.store_records import PosteriorRecords

DIGITS = tuple("0123456789")

#: What the columns judge: handwritten digits (28×28 images), faces (descriptor vectors) or a
#: person's own images (photos opened in the Image tab, read as that posterior's training images were).
TASKS = ("digits", "faces", "images")


def task_of(posterior: Posterior) -> str:
    """"faces" for a posterior of face descriptors, "images" for one trained on a person's own
    images (colour, grey standardised to them, or grey of another side than a digit's), else "digits"."""
    from core.engine.faces.heads import is_face_posterior
    from core.engine.model_inputs import reads_photos

    if is_face_posterior(posterior):
        return "faces"
    return "images" if reads_photos(posterior.arch) else "digits"


def images_words(posterior: Posterior) -> str:
    """What a posterior of one's own images reads, in words: "colour 32×32 images"."""
    from core.engine.model_inputs import images_words as words

    return words(posterior.arch)


def menu_group(posterior: Posterior) -> str:
    """Where the posterior goes in the Add-posterior menu: its tier (one model, every method,
    the same data) or, outside a tier, its model."""
    from core.engine import tiers
    from core.engine.faces.heads import is_face_posterior
    from core.engine.naming import ARCH_LABELS

    words = tiers.tier_words(posterior.info)
    if words is not None:
        return f"Same model, every method: {words}"
    model = ARCH_LABELS.get(posterior.arch.name, posterior.arch.name)
    if is_face_posterior(posterior):
        return f"Ages from a face, {model}"
    return f"Your images, {model}" if task_of(posterior) == "images" else f"Digits, {model}"


def class_names_for(task: str, posterior: Posterior | None = None) -> tuple[str, ...]:
    if task == "faces":
        from core.engine.faces import AGE_GROUP_NAMES

        return tuple(AGE_GROUP_NAMES)
    if task == "images" and posterior is not None:
        from core.analysis.comparison import default_class_names

        return tuple(default_class_names(posterior))  # the class folders' names
    k = posterior.num_classes if posterior is not None else 10
    return DIGITS if k == 10 else tuple(str(i) for i in range(k))


def _listed(names: tuple[str, ...], most: int = 6) -> str:
    quoted = [f"“{n}”" for n in names[:most]] + (["…"] if len(names) > most else [])
    return ", ".join(quoted[:-1]) + " and " + quoted[-1] if len(quoted) > 1 else "".join(quoted)


def reads_digits(records: PosteriorRecords) -> bool:
    """Whether a file's records (read without the engine) are plainly a digit posterior's: grey
    28×28 images read as MNIST's, neither face descriptors nor a person's own photos (those, and
    anything less plain, wait for the engine, which :func:`task_of` asks)."""
    # the engine's one rule, which needs no torch
    from core.engine.model_inputs import reads_digits as digits

    return digits(records.arch)


@dataclass
class Column:
    """One posterior shown as a column; ``key`` is its resolved file path (never shown).

    At start-up ``posterior`` may be the file's records only (:class:`~core.engine.store_records.
    PosteriorRecords`, read without the engine): the column shows its title and words at once and
    predicts nothing until :meth:`Workspace.add_posterior` has read its weights (``ready``)."""

    key: str
    posterior: Posterior | PosteriorRecords
    prediction: Prediction | None = None
    sweep: object | None = None  # core.analysis.metrics.RotationSweep of the last sweep, if any
    #: Why the posterior could not judge the latest input it was given (a sentence), or None.
    failure: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def source(self) -> Path:
        return Path(self.key)

    @property
    def ready(self) -> bool:
        """Whether its weights are in: only then may it predict (a records-only column waits)."""
        return getattr(self.posterior, "ready", True)

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
        A column's prediction changed, or its posterior failed to judge the input (the column key).
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
        self.task = "digits"
        self._columns: dict[str, list[Column]] = {task: [] for task in TASKS}
        self.image: np.ndarray | None = None
        self.preview: np.ndarray | None = None
        self.input_label = ""
        self.class_names: tuple[str, ...] = DIGITS
        self.num_samples = 100
        self.level = 0.9
        #: Tasks whose saved columns are still to be read (the engine imports in the background
        #: at start-up; face heads wait for the Face tab): "no column" there means "not yet".
        self.unread_tasks: set[str] = set()
        #: Whether posterior files may be read now (the engine is loaded: ``load_columns``); before,
        #: digit columns are shown from their files' records (:meth:`add_records`).
        self.engine_loaded = False
        #: The column removed last, as (task, place, column), until it is restored.
        self.last_removed: tuple[str, int, Column] | None = None
        #: Where the columns' posteriors live and predict (a ``torch.device``; None: the CPU).
        self.device = None
        #: The reference (exact inference, HMC) of the tier the digit columns belong to, judged
        #: beside them but not shown as a column (see :meth:`find_reference`), or None.
        self.reference: Column | None = None
        self.columns_changed.connect(self.find_reference)

    def set_device(self, device) -> None:
        """Move every column's posterior (and the last removed one's) to ``device``: their
        predictions run there from the next input on."""
        self.device = device
        for task in TASKS:
            for column in self._columns[task]:
                if column.ready:  # a records-only column's weights are read onto self.device
                    column.posterior = column.posterior.to(device)
        if self.reference is not None:
            self.reference.posterior = self.reference.posterior.to(device)
        if self.last_removed is not None and self.last_removed[2].ready:
            self.last_removed[2].posterior = self.last_removed[2].posterior.to(device)

    @property
    def columns(self) -> list[Column]:
        """The columns of the current task, in order."""
        return self._columns[self.task]

    @columns.setter
    def columns(self, value: list[Column]) -> None:
        self._columns[self.task] = value

    def columns_of(self, task: str) -> list[Column]:
        return self._columns[task]

    def ready_columns(self, task: str | None = None) -> list[Column]:
        """The columns of ``task`` (None: the current one) whose weights are in: the ones that
        predict, sweep and evaluate. A column shown from its file's records waits for its weights."""
        return [c for c in self._columns[self.task if task is None else task] if c.ready]

    @property
    def waiting(self) -> bool:
        """Whether a column of any task is shown from its file's records, its weights still to come."""
        return any(not c.ready for task in TASKS for c in self._columns[task])

    def set_task(self, task: str) -> None:
        """Switch between digit, face and own-image columns (each task keeps its own); clears the input."""
        if task == self.task:
            return
        self.task = task
        first = self.columns[0].posterior if self.columns else None
        self.class_names = class_names_for(task, first)
        self.image, self.preview, self.input_label = None, None, ""
        for column in self.columns:
            column.prediction = None
        self.columns_changed.emit()
        self.input_changed.emit()

    # ------------------------------------------------------------------ columns
    def columns_read(self, task: str) -> None:
        """The saved columns of ``task`` have been read (or failed): say so to the views."""
        if task in self.unread_tasks:
            self.unread_tasks.discard(task)
            self.columns_changed.emit()

    def column(self, key: str) -> Column | None:
        return next((c for c in self.columns if c.key == key), None)

    def column_keys(self) -> list[str]:
        return [c.key for c in self.columns]

    def add_posterior(self, path: str | Path) -> Column:
        """Load a posterior file and append it as a column (once: a second add returns the first).

        A face posterior joins the face columns, a posterior of one's own images the image
        columns and a digit posterior the digit columns, whichever task is shown. Raises
        ``PosteriorFileError`` for a file that cannot be used and ``ValueError`` when that task's
        columns are full or the posterior has other classes than the columns beside it (another
        number, or for one's own images other names).
        """
        key = str(Path(path).expanduser().resolve())
        for task in TASKS:
            existing = next((c for c in self._columns[task] if c.key == key), None)
            if existing is not None:
                if not existing.ready:
                    self._read_weights(task, existing)
                return existing
        from core.engine.store import load_posterior

        posterior = load_posterior(key, device=self.device)
        task = task_of(posterior)
        columns = self._columns[task]
        if len(columns) >= self.MAX_COLUMNS:
            raise ValueError(f"At most {self.MAX_COLUMNS} posteriors fit side by side: remove one first.")
        if task == "images" and columns:
            names, shown = class_names_for(task, posterior), class_names_for(task, columns[0].posterior)
            if names != shown:
                raise ValueError(
                    f"This posterior tells apart {_listed(names)}; the columns of your images shown tell apart "
                    f"{_listed(shown)}: remove them first to compare it with others.")
        if columns and posterior.num_classes != columns[0].posterior.num_classes:
            raise ValueError(
                f"This posterior tells {posterior.num_classes} classes apart, the columns shown tell "
                f"{columns[0].posterior.num_classes}: remove them first to compare it with others."
            )
        if not columns and task == self.task:
            self.class_names = class_names_for(task, posterior)
        column = Column(key, posterior)
        columns.append(column)
        if task == self.task:
            self.columns_changed.emit()
        return column

    def add_records(self, path: str | Path, records: PosteriorRecords) -> Column:
        """Show a digit posterior from its file's records, before the engine loads: a column with
        its title and words that predicts nothing until :meth:`add_posterior` reads its weights
        (:mod:`core.engine.store_records`). The records must be a digit posterior's (:func:`reads_digits`)."""
        if not reads_digits(records):
            raise ValueError("only a digit posterior is shown before its weights are read")
        key = str(Path(path).expanduser().resolve())
        columns = self._columns["digits"]
        existing = next((c for c in columns if c.key == key), None)
        if existing is not None:
            return existing
        if len(columns) >= self.MAX_COLUMNS:
            raise ValueError(f"At most {self.MAX_COLUMNS} posteriors fit side by side: remove one first.")
        if columns and records.num_classes != columns[0].posterior.num_classes:
            raise ValueError("its classes differ from the columns beside it")
        if not columns and self.task == "digits":
            self.class_names = class_names_for("digits", records)
        column = Column(key, records)
        columns.append(column)
        if self.task == "digits":
            self.columns_changed.emit()
        return column

    def _read_weights(self, task: str, column: Column) -> None:
        """Replace a records-only column's records by its posterior, read from its file (every
        check of ``load_posterior``); a file that fails, or turns out other than its records said,
        loses its column and raises as ``add_posterior`` does. Views hear of it with the task's
        next ``columns_changed`` (the session's ``columns_read``)."""
        from core.engine.store import load_posterior

        try:
            posterior = load_posterior(column.key, device=self.device)
            if task_of(posterior) != task or posterior.num_classes != column.posterior.num_classes:
                raise ValueError("The file changed while it was being read: open it again.")
        except Exception:
            self._columns[task].remove(column)
            if task == self.task:
                self.columns_changed.emit()
            raise
        column.posterior = posterior

    def remove(self, key: str) -> Column | None:
        """Remove a column of the current task; it is kept as :attr:`last_removed` for
        :meth:`restore_removed` (one step of undo)."""
        keys = self.column_keys()
        if key not in keys:
            return None
        index = keys.index(key)
        column = self.columns.pop(index)
        self.last_removed = (self.task, index, column)
        self.columns_changed.emit()
        return column

    def restore_removed(self) -> Column | None:
        """Put the last removed column back at its place (it judges the current input afresh);
        None when there is none, or it cannot come back (shown again, or its task is full)."""
        if self.last_removed is None:
            return None
        task, index, column = self.last_removed
        self.last_removed = None
        columns = self._columns[task]
        if any(c.key == column.key for c in columns) or len(columns) >= self.MAX_COLUMNS:
            return None
        column.prediction, column.failure, column.sweep = None, None, None
        columns.insert(min(index, len(columns)), column)
        if not column.ready and self.engine_loaded:  # removed before its weights were read
            try:
                self._read_weights(task, column)
            except Exception:  # noqa: BLE001 — gone or changed since: it does not come back
                return None
        if task == self.task:
            self.columns_changed.emit()
        return column

    def move(self, key: str, offset: int) -> None:
        """Move a column ``offset`` places to the right (negative: left), clamped to the ends."""
        index = self.column_keys().index(key)
        target = min(max(index + offset, 0), len(self.columns) - 1)
        if target != index:
            self.columns.insert(target, self.columns.pop(index))
            self.columns_changed.emit()

    # -------------------------------------------------------------------- input
    def set_input(self, image: np.ndarray | None, label: str = "", preview: np.ndarray | None = None) -> None:
        """Set the model input every column judges (None: nothing to judge).

        For digits a 28×28 image (its own preview); for faces a descriptor vector (D,) and
        the aligned face crop as the preview; for one's own images a ``Photo`` and what the
        first column sees of it (RGB uint8) as the preview.
        """
        # a photo of one's own (core.engine.data.images.Photo) stays as it is: each column reads it
        self.image = image if image is None or hasattr(image, "model_input") else np.asarray(image, dtype=np.float32)
        self.preview = self.image if preview is None else preview
        self.input_label = label
        if image is None:
            for column in self.columns:
                column.prediction = None
        self.input_changed.emit()

    def set_prediction(self, key: str, prediction: Prediction | None) -> None:
        self.set_predictions([(key, prediction)])

    def set_predictions(self, predictions: list[tuple[str, Prediction | None]]) -> None:
        """Set one request's predictions, then say once for each column that changed: its own
        prediction, or the reference's that its marks show (set one at a time, the reference's
        arrival would first redraw every other column with its old prediction)."""
        changed = set()
        for key, prediction in predictions:
            column = self.column(key)
            if column is not None:
                column.prediction = prediction
                column.failure = None
                changed.add(key)
            if self.reference is not None and key == self.reference.key:
                self.reference.prediction = prediction
                # their marks of the reference move with it
                changed.update(other.key for other in self.columns if self.reference_for(other) is not None)
        for column in self.columns:
            if column.key in changed:
                self.prediction_changed.emit(column.key)

    # ------------------------------------------------------------------ reference
    def find_reference(self) -> None:
        """Find the reference of the tier the shown columns belong to (the first such column's
        tier with a reference: the paper tier's, the face tier's), beside that column's file or among
        the bundled posteriors; load it once. A person who never adds a tier's posterior never loads one."""
        from core.engine import tiers
        from core.engine.resources import resources_dir

        if any(not c.ready for c in self.columns):
            return  # found once the weights are in (the reference is read with the engine)
        wanted = None
        for column in self.columns:
            tier = tiers.tier_of(column.posterior.info)
            found = tiers.reference_candidates(tier, column.posterior.arch.name, column.source.parent,
                                               resources_dir() / "models") if tier else []
            wanted = next((p for p in found if p.is_file()), None)
            if wanted is not None:
                break
        key = None if wanted is None else str(wanted.resolve())
        if key == (self.reference.key if self.reference else None):
            return
        self.reference = None
        if key is not None:
            from core.engine.store import load_posterior

            shown = next((c for c in self.columns if c.key == key), None)  # read once, not twice (12 MB for HMC)
            try:
                self.reference = Column(key, shown.posterior if shown is not None else load_posterior(key, device=self.device))
            except Exception:  # noqa: BLE001 - without its reference a tier's columns show no marks
                self.reference = None

    def reference_for(self, column: Column) -> Column | None:
        """The reference ``column`` is marked against: that of its own tier and model, when it is
        not the reference itself; None otherwise."""
        from core.engine import tiers

        ref = self.reference
        if ref is None or column.key == ref.key or column.posterior.method == ref.posterior.method:
            return None
        same = (tiers.tier_of(column.posterior.info), column.posterior.arch.name) == (
            tiers.tier_of(ref.posterior.info), ref.posterior.arch.name)
        return ref if same else None

    def reference_expected(self) -> bool:
        """While some column's weights are still being read (the reference is found only once they
        are in, :meth:`find_reference`): whether a shown column is of a tier with exact inference
        and not of its method, so that its comparison line will come. The columns keep that line's
        room from the start, and their plots do not move when the weights arrive."""
        from core.engine import tiers

        if all(c.ready for c in self.columns):
            return False
        return any((tier := tiers.tier_of(c.posterior.info)) in tiers.REFERENCES
                   and c.posterior.method != tiers.REFERENCES[tier] for c in self.columns)

    def set_failure(self, key: str, message: str) -> None:
        """The column's posterior could not judge the input: it shows ``message`` instead."""
        column = self.column(key)
        if column is not None:
            column.prediction = None
            column.failure = message
            self.prediction_changed.emit(key)

    def set_sampling(self, num_samples: int | None = None, level: float | None = None) -> None:
        if num_samples is not None:
            self.num_samples = int(num_samples)
        if level is not None:
            self.level = float(level)
        self.settings_changed.emit()
