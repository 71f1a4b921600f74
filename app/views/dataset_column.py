"""One posterior's column on the Dataset tab: its metrics and the data-set plots core computed
(:class:`core.analysis.dataset.ColumnViews`), with how far it lies from its tier's reference."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.plots.dataset_plots import (
    ClassErrorPlot,
    HardConfusionPlot,
    OodHistogramPlot,
    RejectionPlot,
    ReliabilityPlot,
    SoftConfusionPlot,
)
from app.views.column import column_title
from app.views.dataset_tables import MetricsTable, OodSetsTable
from core.analysis.dataset import ColumnViews
from core.engine import tiers

if TYPE_CHECKING:
    from app.workspace import Workspace
    from core.analysis.dataset import DatasetViews


class DatasetColumn(QFrame):
    """One posterior's data-set views, fed a :class:`core.analysis.dataset.ColumnViews`.

    Signals: export_requested(str view), cell_clicked(str name, bool soft, int true, int
    predicted), bin_clicked(str name, int bin, bool ood).
    """

    export_requested = Signal(str)
    cell_clicked = Signal(str, bool, int, int)
    bin_clicked = Signal(str, int, bool)

    #: Four columns fit beside the left panel in a 1600-pixel-wide window.
    MIN_WIDTH = 228

    REFERENCE_TIP = ("This posterior belongs to a set that shares one model, data set and prior with HMC, the "
                     "set's reference (exact inference once its chains have converged: its column says whether "
                     "they have). Same top class: how often both predict the same "
                     "class. Differs by: the total variation between their average predictions, averaged over "
                     "the images (0 = the same; it is the most probability that any choice of classes gets from "
                     "one and not the other).")

    def __init__(self, column: ColumnViews, title: str, class_names: tuple[str, ...], score: str,
                 set_names: tuple[str, str | None] = ("test set", None), reference_note: str = "",
                 parent: QWidget | None = None, *, ood_words: dict[str, str] | None = None,
                 best: dict[tuple[str, str], tuple[str, ...]] | None = None, shown: int = 1) -> None:
        super().__init__(parent)
        self.column = column
        self.name = column.name
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.metrics = MetricsTable()
        self.setMinimumWidth(max(self.MIN_WIDTH, self.metrics.minimumWidth() + 8))  # the metrics' names whole
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.title = column_title(title)
        self.note = QLabel("from the cache" if column.cached else "")
        self.note.setStyleSheet("color: #777;")
        self.note.setToolTip("These results were computed before with the same posterior file, images, "
                             "draws and seed, and kept; nothing was recomputed.")
        self.reliability = ReliabilityPlot()
        self.soft = SoftConfusionPlot(class_names)
        self.hard = HardConfusionPlot(class_names)
        self.errors = ClassErrorPlot(class_names)
        self.rejection = RejectionPlot()
        self.ood_sets = OodSetsTable()
        self.ood_sets_title = QLabel("Unfamiliar sets told apart (AUROC)")
        self.ood_sets_title.setWordWrap(True)
        self.ood_sets_title.setToolTip(self.ood_sets.toolTip())
        self.ood_sets.show_column(column, ood_words or {}, best or {}, shown)
        for widget in (self.ood_sets, self.ood_sets_title):
            widget.setVisible(bool(column.ood_sets))
        self.histogram = OodHistogramPlot()
        self.histogram.set_set_names(*set_names)
        self.plots = {"reliability": self.reliability, "ood_histograms": self.histogram, "rejection": self.rejection,
                      "confusion_soft": self.soft, "confusion_hard": self.hard, "per_class_error": self.errors}
        for widget in (self.metrics, self.ood_sets, *self.plots.values()):
            widget.export_requested.connect(self.export_requested)
        self.soft.cell_clicked.connect(lambda i, j: self.cell_clicked.emit(self.name, True, i, j))
        self.hard.cell_clicked.connect(lambda i, j: self.cell_clicked.emit(self.name, False, i, j))
        self.histogram.bin_clicked.connect(lambda b, ood: self.bin_clicked.emit(self.name, b, ood))
        header = QHBoxLayout()
        header.addWidget(self.title, 1)
        header.addWidget(self.note)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)
        layout.addLayout(header)
        self.reference = QLabel(reference_note)
        self.reference.setWordWrap(True)
        self.reference.setToolTip(self.REFERENCE_TIP)
        self.reference.setVisible(bool(reference_note))
        layout.addWidget(self.reference)
        layout.addWidget(self.metrics)
        layout.addWidget(self.ood_sets_title)
        layout.addWidget(self.ood_sets)
        for plot in self.plots.values():
            layout.addWidget(plot)
        layout.addStretch(1)
        for plot in (self.reliability, self.soft, self.hard, self.errors, self.rejection):
            plot.show_column(column)
        self.set_score(score)

    def set_score(self, score: str) -> None:
        """Show the histogram (and AUROC) of another uncertainty score."""
        self.metrics.show_column(self.column, score)
        self.histogram.show_column(self.column, score)


def reference_notes(workspace: Workspace, views: DatasetViews, keys: list[str]) -> dict[str, str]:
    """Per shown column of a tier (by its name in ``views``; ``keys``: the workspace columns they
    are of), how far its predictive lies from the tier's reference over the images: top-class
    agreement and mean total variation, in words."""
    from core.analysis.fidelity import predictive_fidelity

    ref = workspace.reference
    if ref is None:
        return {}
    by_key = dict(zip(keys, views.columns, strict=False))
    ref_name = (by_key[ref.key].name if ref.key in by_key else
                views.columns[-1].name if len(views.columns) > len(keys) else None)
    results = views.evaluation.results
    if ref_name is None or ref_name not in results:
        return {}
    notes = {}
    for key, column in by_key.items():
        shown = workspace.column(key)
        if key == ref.key:  # its own line too, so that every column's views start at one height
            notes[column.name] = (f"{tiers.reference_words(ref.posterior.info)[0]}: the reference the other "
                                  "columns of its set are measured against")
            continue
        if shown is None or workspace.reference_for(shown) is None:
            continue
        f = predictive_fidelity(results[ref_name].data.mean_proba, results[column.name].data.mean_proba)
        notes[column.name] = (f"Against {tiers.reference_words(ref.posterior.info)[0].replace('Exact', 'exact')}: "
                              f"same top class on {f.agreement * 100:.1f}% "
                              f"of the images; differs by {f.total_variation:.3f} on average")
    return notes
