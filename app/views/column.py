"""One posterior's column: its name in words, a one-line verdict and every per-input plot.

The workspace lays out N of these; a column is fed a :class:`app.workspace.Column` and draws
what it holds. It asks for changes through signals (remove, move, export), never itself.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.plots.input_views import INPUT_PLOTS, InputPlot
from app.plots.style import REFERENCE, WARNING
from app.views.rich_lines import Paragraph, RichLines
from app.workspace import Column
from core.engine import tiers
from core.engine.naming import (
    METHOD_DESCRIPTIONS,
    convergence_advice,
    convergence_lines,
    convergence_warning,
    dataset_words,
    fit_lines,
    fixed_sample_count,
    interval_mass_line,
    interval_mass_words,
    plural,
)

if TYPE_CHECKING:
    from core.analysis.predictive import Prediction


def column_title(text: str = "") -> QLabel:
    """A column's title in bold, with room for two lines: the plots below it then start at the
    same height in every column, whether a title wraps at this width or not."""
    label = QLabel(f"<b>{text}</b>" if text else "")
    label.setWordWrap(True)
    label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
    label.setMinimumHeight(TWO_LINES())
    return label


def TWO_LINES() -> int:  # noqa: N802 (a constant once the fonts are known)
    """The height of two bold lines of a title."""
    probe = QLabel("<b>Xg<br>Xg</b>")
    return probe.sizeHint().height()


VIEW_NAMES = {
    "histograms": "Draws per class",
    "interval": "Mean probability and interval",
    "entropy": "Uncertainty (nats)",
    "variance": "Variance per class",
    "correlation": "Class correlation",
}

VERDICT_TIP = (
    "The first line says in words what the numbers below add up to: sure (the average "
    "probability p̄ of one class is 0.9 or more), probably, torn between two classes, or unsure; "
    "“unlike anything it was trained on” when the sampled models disagree with one another "
    "(the epistemic part of the uncertainty). While you draw, the comparison with exact inference "
    "and the conformal and credible sets wait, faded, for the full count when you stop. Help (F1) "
    "explains every term. "
)
OVERLAP_TIP = (
    "The overlap flag compares the spread of the draws for the two most likely classes "
    "(Bhattacharyya coefficient, 0 = apart, 1 = identical). Above 0.5 the posterior cannot "
    "tell the two apart: the input is uncertain."
)


#: A link to a Help paragraph: ``help:<anchor>`` (an anchor of :data:`app.help.HOW_TO_READ`).
HELP_LINK = "help:"
#: What a column shown from its file's records says while its weights are read (the engine
#: starts in the background at launch): its plots stay empty until its numbers arrive.
WAITING_NOTE = "Reading this posterior's weights: its numbers appear in a moment."
WAITING_DIAGNOSTICS = "Available in a moment, once this posterior's weights are read."
def warning_html(info: dict, trusted: str | None = None) -> str | None:
    """A column's red convergence line: what the file records (bold), what it means for the
    reader and what to do, and a link to its Help paragraph; None when the chains agree."""
    warning = convergence_warning(info)
    if warning is None:
        return None
    advice = convergence_advice(info, trusted)
    return (f"<span style='color:{WARNING}'><b>{html.escape(warning)}</b> {html.escape(advice)}</span> "
            f"<a href='{HELP_LINK}chains' style='color:{WARNING}'>What this means</a>")


class LabelHolder(QWidget):
    """A widget that keeps its one child at its own size, with no layout to bother."""

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        for child in self.children():
            if isinstance(child, QWidget):
                child.setGeometry(self.rect())



def plain_verdict(summary, class_names: tuple[str, ...]) -> Paragraph:
    """The column's first line, before any symbol: one sentence of verdict in plain words
    ("Sure it is a 4", "Torn between 4 and 9"), from :func:`core.analysis.verdict.summary_verdict`."""
    # imported here: the engine is loaded once a prediction exists, not when the window is built
    from core.analysis.verdict import summary_verdict

    return (((summary_verdict(summary, class_names).text, "b"),), None)


#: The column menu's entry that calibrates the column's conformal sets (app.controllers.calibrating).
CALIBRATE_ACTION = "Calibrate conformal sets…"
CALIBRATE_TIP = ("Measure, on half of this posterior's test set (images it never trained on), how wide its "
                 "conformal sets must be to hold the true class as often as they promise; the other half "
                 "stays for the Dataset tab to check it. The status bar shows how long it has left.")
#: What a column without a calibration says in place of its conformal set.
NO_CALIBRATION = f"No conformal set yet: “{CALIBRATE_ACTION}” in this column's ⋯ menu makes one"


def calibration_of(column: Column):
    """The column's conformal calibration and, when it has none, the line saying how to get one:
    read once per column (kept in ``column.extra``), never per stroke."""
    if "conformal" not in column.extra:  # (the import only then: this runs on every update)
        from core.analysis.conformal_run import column_calibration

        calibration, why = column_calibration(column.key)
        column.extra["conformal"] = (calibration, why or ("" if calibration is not None else NO_CALIBRATION))
    return column.extra["conformal"]


def conformal_lines(column: Column, mean, class_names: tuple[str, ...], level: float) -> tuple[list[Paragraph], str]:
    """The column's conformal set beside its credible set at ``level`` (two paragraphs), and the
    tooltip saying what the guarantee means; one line saying how to get a calibration when the
    posterior has none."""
    from core.analysis.conformal import sets_in_words

    calibration, missing = calibration_of(column)
    if calibration is None:
        return [(((missing, "i"),), None)], ""
    words = sets_in_words(mean, class_names, calibration, level)
    credible = words.credible + (f" — {words.disagreement[0].lower()}{words.disagreement[1:]}"
                                 if words.disagreement else " — the same classes")
    return [(((words.conformal, "b"),), None), (((credible, ""),), None)], words.tooltip


def _array(values):
    """A summary's tensor as numpy (a view, no copy), or the array it already is."""
    return values.numpy() if hasattr(values, "numpy") else values


def preview_note(num_samples: int, full: int) -> str:
    """What a preview says about itself: how many draws it is judged from, and when all come."""
    return f"a quick look at {num_samples} draws while you draw; all {full} when you stop"


def comparison_waits(reference: str) -> Paragraph:
    """A preview's line in place of the comparison with the tier's reference (``reference``: what
    it is called), saying that it comes with the full count; never longer than the comparison, so
    the verdict's room (``verdict_room``) holds it."""
    return (((f"{reference}: compared when you stop", "i"),), REFERENCE)


#: A preview's line in place of the conformal and credible sets (two lines at the full count).
SETS_WAIT: Paragraph = ((("Conformal and credible sets: found when you stop", "i"),), None)


def verdict_room(longest: str) -> Paragraph:
    """The room the plain verdict needs: its longest sentence, with the longest class name."""
    return (((f"Leans to “{longest}”, but unlike anything it was trained on", "b"),), None)


class ColumnView(QFrame):
    """Signals
    -------
    remove_requested(str), move_requested(str, int), export_requested(str, str)
        Column key (and offset, or the view key to export).
    diagnostics_requested(str)
        Column key: show whether its chains agreed.
    """

    remove_requested = Signal(str)
    #: The column's width changed: the row lines its title and verdict up with the other columns'.
    width_changed = Signal()
    diagnostics_requested = Signal(str)
    calibrate_requested = Signal(str)
    move_requested = Signal(str, int)
    export_requested = Signal(str, str)
    #: A term was clicked: the Help paragraph of this anchor (app.help) should open.
    help_requested = Signal(str)
    #: A plot's own label choice changed with its size: the row agrees on one again.
    labels_fitted = Signal()

    MIN_WIDTH = 200

    def __init__(self, key: str, class_names: tuple[str, ...], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.key = key
        self.setObjectName("column")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setMinimumWidth(self.MIN_WIDTH)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

        self.title = column_title()
        self.title.setObjectName("columnTitle")
        more = self._button("⋯", "Move or export this column, or see whether its chains agreed", None)
        more.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(more)
        menu.setToolTipsVisible(True)  # a disabled entry says why
        self.move_left = menu.addAction("Move left", lambda: self.move_requested.emit(self.key, -1))
        self.move_right = menu.addAction("Move right", lambda: self.move_requested.emit(self.key, 1))
        menu.addSeparator()
        for view, name in VIEW_NAMES.items():
            menu.addAction(f"Export {name.lower()}…", lambda v=view: self.export_requested.emit(self.key, v))
        menu.addSeparator()
        self.diagnostics = menu.addAction("Diagnostics…", lambda: self.diagnostics_requested.emit(self.key))
        self.calibrate = menu.addAction(CALIBRATE_ACTION, lambda: self.calibrate_requested.emit(self.key))
        self.calibrate.setToolTip(CALIBRATE_TIP)
        menu.addSeparator()
        menu.addAction("Remove", lambda: self.remove_requested.emit(self.key))
        more.setMenu(menu)
        close = self._button("✕", "Remove this column", lambda: self.remove_requested.emit(self.key))
        header = QHBoxLayout()
        header.setSpacing(0)
        header.addWidget(self.title, 1)
        for button in (more, close):
            header.addWidget(button, 0, Qt.AlignmentFlag.AlignTop)

        # The verdict sits in a holder without a layout: a label's new text asks its parent's
        # layout to recompute, which here would re-lay out the whole window on every
        # prediction (3.5 ms for 4 columns); the holder absorbs that request.
        # Says, in red, when the file records chains that disagree (R̂ above 1.1). While any
        # column says so, every column keeps the same room for it (the window asks, see
        # reserve_warning_room), so that the plots still start at one height in every column.
        self.convergence = QLabel()
        self.convergence.setObjectName("convergenceWarning")
        self.convergence.setWordWrap(True)
        self.convergence.setTextFormat(Qt.TextFormat.RichText)
        self.convergence.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.convergence.setVisible(False)
        self.convergence.setOpenExternalLinks(False)
        self.convergence.setTextInteractionFlags(Qt.TextInteractionFlag.LinksAccessibleByMouse)
        self.convergence.linkActivated.connect(self._on_convergence_link_activated)
        self._warning_room = QLabel()  # never shown: measures the row's warnings at this width
        self._room_texts: list[str] = []
        self._warning_room.setWordWrap(True)
        self._warning_room.setTextFormat(Qt.TextFormat.RichText)
        self._warning = None
        self._reserve_warning = False
        self._header_for: tuple[object, str, str | None] | None = None  # posterior, title, trusted shown
        self._waiting = False  # shown from its file's records: its weights are still being read

        self._verdict_holder = LabelHolder()
        self.verdict = RichLines(self._verdict_holder)
        self.verdict.setObjectName("verdict")
        self.verdict.setToolTip(VERDICT_TIP + OVERLAP_TIP)
        self._verdict_tip: str | None = None  # the tooltip a prediction gave it last
        # the reference's name and the interval's mass in words, with the two files' infos they
        # were worded from (see _reference_words)
        self._words_for: tuple[dict | None, dict, tuple[str, str], str | None] | None = None
        # The verdict's height follows the column's width, never its text: a label that grew or
        # shrank as a note line came and went would re-lay out and repaint every plot below.
        self._longest = max(class_names, key=len)
        self._verdict_room = RichLines()  # never shown: the longest verdict, for its height
        self._row_verdict_room = 0  # the tallest verdict room of the row (set_verdict_room)
        self.reserve_reference_room(False)

        self._failed = False  # the verdict holds a failure's sentence
        self.plots: dict[str, InputPlot] = {}
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)
        layout.addLayout(header)
        layout.addWidget(self.convergence)
        layout.addWidget(self._verdict_holder)
        stretch = {"histograms": 5, "interval": 3, "entropy": 2, "variance": 3, "correlation": 4}
        for cls in INPUT_PLOTS:
            plot = cls(class_names)
            plot.export_requested.connect(lambda view: self.export_requested.emit(self.key, view))
            plot.help_requested.connect(self.help_requested)
            plot.labels_fitted.connect(self.labels_fitted)
            self.plots[cls.view_key] = plot
            layout.addWidget(plot, stretch[cls.view_key])

    def title_height(self) -> int:
        """The height this column's title needs at its width (two lines at least)."""
        return max(TWO_LINES(), self.title.heightForWidth(max(self.title.width(), 1)))

    def set_title_room(self, height: int) -> None:
        """Give the title ``height`` (the tallest title of the row): the plots of every column
        then start at one height however their titles wrap."""
        if self.title.minimumHeight() != height:
            self.title.setMinimumHeight(height)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        width = self._verdict_holder.width()
        if width > 0 and width != getattr(self, "_verdict_width", None):
            self._verdict_width = width
            self._fit_verdict()
            self._fit_warning()
        if event.size().width() != event.oldSize().width():
            self.width_changed.emit()  # the row gives every column the room of its tallest title and verdict

    @property
    def has_warning(self) -> bool:
        """Whether this column's file records chains that disagree."""
        return self._warning is not None

    @property
    def warning(self) -> str | None:
        """This column's convergence warning as shown (rich text), or None."""
        return self._warning

    def reserve_warning_room(self, warnings: list[str]) -> None:
        """Keep the room the tallest of the row's convergence ``warnings`` takes at this column's
        width (blank when this column has none), so that none is cut and none padded; none when
        the list is empty."""
        self._reserve_warning = bool(warnings)
        self._room_texts = list(warnings)
        self.convergence.setVisible(bool(warnings))
        self._fit_warning()

    def reserve_reference_room(self, reserve: bool) -> None:
        """Keep room in the verdict for the line of a tier's reference (blank in a column without
        one), or none: while any column shows that line, all keep its room and stay aligned."""
        longest = self._longest
        lines = [verdict_room(longest),
                 ((("Reads ", ""), (longest, "b"), (": p̄ 0.88 (90%: 0.88–0.88)", "")), None),
                 ((("Uncertain:", "b"), (f" {longest} and {longest} overlap (0.88)", "")), WARNING),
                 ((("a quick look at 16 draws while you draw; all 1000 when you stop", "i"),), None),
                 (((f"Conformal: could be {longest} or {longest}, 90 % guaranteed", "b"),), None),
                 (((f"Credible: {longest} or {longest} hold 90 % of the belief — they differ: the guarantee "
                    f"also needs {longest}", ""),), None)]
        if reserve:
            lines.insert(2, ((("HMC (not converged, R̂ 8.88): reads ", ""), (longest, "b"),
                              (", p̄ 0.88; this column differs by 0.88; its 88 % interval holds about 88 % "
                               "of what exact inference believes", "")), REFERENCE))
        before = self._verdict_room.text()
        self._verdict_room.set_paragraphs(lines)
        if self._verdict_room.text() != before and hasattr(self, "_failed"):  # not while the column is being built
            self._fit_verdict()

    def set_calibrating(self, this: bool | None) -> None:
        """This column's conformal sets are being calibrated (True), another column's (False), or
        none (None): the menu entry stops this one's and waits while another's runs."""
        self.calibrate.setText("Stop calibrating" if this else CALIBRATE_ACTION)
        self.calibrate.setEnabled(this is not False)
        self.calibrate.setToolTip("Another column is being calibrated: one at a time" if this is False
                                  else "Stop this calibration" if this else CALIBRATE_TIP)

    def _fit_warning(self) -> None:
        width = self._verdict_holder.width()
        if self._reserve_warning and width > 0:
            heights = []
            for text in self._room_texts:
                self._warning_room.setText(text)
                heights.append(self._warning_room.heightForWidth(width))
            self.convergence.setFixedHeight(max(heights) + 2)

    def verdict_room_height(self) -> int:
        """The height the longest verdict needs at this column's width (0 before it has one)."""
        width = self._verdict_holder.width()
        return self._verdict_room.heightForWidth(width) + 2 if width > 0 else 0

    def set_verdict_room(self, height: int) -> None:
        """Give the verdict at least ``height`` (the row's tallest room): columns a pixel apart in
        width can wrap the longest verdict to a different number of lines, which would start their
        plots a line apart."""
        if height != self._row_verdict_room:
            self._row_verdict_room = height
            self._fit_verdict()

    def _fit_verdict(self) -> None:
        """The verdict's room for this width, at least the row's; a failure's longer sentence gets
        the room it needs."""
        width = self._verdict_holder.width()
        if width <= 0:
            return
        height = max(self.verdict_room_height(), self._row_verdict_room)
        if self._failed:
            height = max(height, self.verdict.heightForWidth(width) + 2)
        if self._verdict_holder.height() != height:
            self._verdict_holder.setFixedHeight(height)

    def _button(self, text: str, tip: str, slot) -> QToolButton:
        button = QToolButton(text=text)
        button.setFixedWidth(22)
        button.setToolTip(tip)
        button.setAutoRaise(True)
        if slot is not None:
            button.clicked.connect(slot)
        return button

    def set_place(self, index: int, count: int) -> None:
        """The column's place in the row: no "Move left" for the first, no "Move right" for the last."""
        self.move_left.setEnabled(index > 0)
        self.move_right.setEnabled(index < count - 1)
        self.move_left.setToolTip("" if index > 0 else "This is the first column already.")
        self.move_right.setToolTip("" if index < count - 1 else "This is the last column already.")

    def set_header(self, column: Column, requested: int, trusted: str | None = None) -> None:
        """The title and its tooltip, the convergence warning: the posterior's and the sample
        count's, not the prediction's, so called again for the same two (every prediction of a
        stroke) it returns at once. ``trusted``: the column of its set to read instead should its
        chains disagree (its tier's exact inference, when converged), or None."""
        title = column.title(requested)
        if self._header_for == (column.posterior, title, trusted):
            return
        self._header_for = (column.posterior, title, trusted)
        fixed = fixed_sample_count(column.posterior)
        self.title.setText(f"<b>{title}</b>")
        self._waiting = not column.ready
        if self._waiting:  # shown from its file's records while the engine loads
            unavailable = WAITING_DIAGNOSTICS
        else:  # the engine is loaded by now
            from core.analysis.diagnostics import diagnostics_unavailable

            unavailable = diagnostics_unavailable(column.posterior.info)  # two empty "n/a" plots otherwise
        self.diagnostics.setEnabled(unavailable is None)
        self.diagnostics.setToolTip(unavailable or "Each chain's trace and R̂ per class: did the chains agree?")
        words = METHOD_DESCRIPTIONS.get(column.posterior.method, column.posterior.method)
        tip = [words[:1].upper() + words[1:] + "."]  # not str.capitalize, which lowers "Gaussians"
        if fixed is not None:
            tip.append(f"This posterior holds {plural(fixed, 'stored draw')}: it cannot draw more.")
        else:
            tip.append("Draws as many models as the Samples box asks for.")
        tip.append(f"Trained on {dataset_words(column.posterior.dataset)}.")
        # what the file records about convergence (never computed here): one line each
        lines = [html.escape(line) for line in convergence_lines(column.posterior)]
        notes = fit_lines(column.posterior.method, column.posterior.info, column.posterior.config)
        notes += [line] if (line := interval_mass_line(column.posterior.info)) else []
        fit = "".join(f"<br><br>{html.escape(line)}" for line in notes)
        self.title.setToolTip(html.escape(" ".join(tip)) + fit + "<br><br>" + "<br>".join(lines))
        warning = warning_html(column.posterior.info, trusted)
        if warning != self._warning:
            self._warning = warning
            self.convergence.setText(warning or "")
            self.convergence.setToolTip("<br>".join(lines) + "<br><br>The column's menu (⋯) has "
                                        "Diagnostics… with each chain's trace and R̂ per class."
                                        if warning else "")

    def _on_convergence_link_activated(self, link: str) -> None:
        self.help_requested.emit(link.removeprefix(HELP_LINK))

    def show_column(self, column: Column, class_names: tuple[str, ...], level: float, full: int | None = None,
                    reference: Prediction | None = None, reference_info: dict | None = None) -> None:
        """Draw the column's latest prediction (or say that there is none yet).

        ``full`` is the number of draws the column uses at rest; a prediction from fewer (while
        the input is moving) says so. ``reference`` is exact inference's (HMC's) prediction on
        the same input for a column of a tier that has one: marked on its plot, and said, in the
        words its convergence allows (``reference_info``: the reference's file info).
        """
        prediction = column.prediction
        if not column.ready:
            self.clear_column()
            return
        if column.failure is not None:
            self.show_failure(column.failure)
            return
        if prediction is None:
            self.clear_column()
            return
        if self._failed:
            self._failed = False
            self._fit_verdict()
        who, mass = self._reference_words(column, reference_info)
        interval = self.plots.get("interval")
        if interval is not None:
            interval.set_reference(None if reference is None else reference.summary, who[1])
        for plot in self.plots.values():
            plot.show(prediction, level)
        s = prediction.summary
        top = s.predicted_class
        # the numbers read from numpy's views of the tensors: indexing a tensor makes a tensor
        # (a few µs each, five a column per update); the same float32 values either way
        mean = _array(s.mean)
        # one draw has no spread: an interval from it would claim a certainty it never measured;
        # the level is the one the interval holds at this many draws (78% from 8, not 90%)
        interval = (f"({round(100 * s.expected_coverage)}%: {float(_array(s.lower)[top]):.2f}–"
                    f"{float(_array(s.upper)[top]):.2f})" if s.num_samples > 1 else "(no interval)")
        headline: list[Paragraph] = [plain_verdict(s, class_names), ((("Reads ", ""), (class_names[top], "b"),
                                       (f": p̄ {float(mean[top]):.2f} {interval}", "")), None)]
        first, second = (class_names[c] for c in s.top_two)
        if s.num_samples > 1 and s.uncertain:
            headline.append(((("Uncertain:", "b"), (f" {first} and {second} overlap ({s.overlap:.2f})", "")), WARNING))
        elif s.num_samples > 1:
            headline.append((((f"{first} vs {second}: overlap {s.overlap:.2f}", ""),), None))
        else:
            headline.append(((("one draw: no spread to compare", ""),), None))
        quick = full is not None and s.num_samples < full
        if quick:
            # While a stroke moves, only what a person watches change is worked out: the plots, the
            # verdict's sentence, the top class's numbers and the overlap flag. The comparison with
            # the reference and the conformal and credible sets say, faded, that they come with the
            # full count (comparing, finding the sets and laying out their new words on every move
            # was a fifth of feeding a column). No word of an earlier input stays: a faded "HMC
            # reads 7" under this input's "Probably a 0" would read as a contradiction.
            calibration, missing = calibration_of(column)
            waiting = [] if reference is None else [comparison_waits(who[0])]
            if calibration is not None:
                waiting.append(SETS_WAIT)
            verdict = [*headline, (((preview_note(s.num_samples, full), "i"),), None), *waiting]
            if calibration is None:  # the same sentence whatever the input: it does not wait
                verdict.append((((missing, "i"),), None))
            start = len(headline) + 1
            self.verdict.set_paragraphs(verdict, range(start, start + len(waiting)))
            return
        compared: list[Paragraph] = []
        if reference is not None:
            r = reference.summary
            tv = 0.5 * float((s.mean - r.mean).abs().sum())  # in torch, as summed before (float32)
            compared.append((((f"{who[0]}: reads ", ""), (class_names[r.predicted_class], "b"),
                               (f", p̄ {float(_array(r.mean)[r.predicted_class]):.2f}; this column differs by {tv:.2f}"
                                + (f"; {mass}" if mass else ""), "")),
                             REFERENCE))
        sets, tip = conformal_lines(column, mean, class_names, level)
        verdict = [*headline, *compared, *sets]
        tip = VERDICT_TIP + OVERLAP_TIP + (f"\n\n{tip}" if tip else "")
        if self._verdict_tip != tip:  # asking Qt for the tooltip copied it (≈ 1 kB) every update
            self._verdict_tip = tip
            self.verdict.setToolTip(tip)
        self.verdict.set_paragraphs(verdict)

    def _reference_words(self, column: Column, reference_info: dict | None) -> tuple[tuple[str, str], str | None]:
        """What the reference is called (:func:`core.engine.tiers.reference_words` of its file's
        ``reference_info``) and how much of its belief this column's interval holds (the column
        file's record, :func:`core.engine.naming.interval_mass_words`): the files', not the
        input's, so worded again only when either file's info is another (a new reference, a
        column given another posterior), not on every prediction of a stroke."""
        info = column.posterior.info
        kept = self._words_for
        if kept is not None and kept[0] is reference_info and kept[1] is info:
            return kept[2], kept[3]
        who = tiers.reference_words(reference_info or {})
        # the file's measure over the probe set, not this input's: how much of the reference's
        # belief the column's interval holds (bayescope-cli fidelity --record)
        mass = interval_mass_words(info, "exact inference" if who[0].startswith("Exact") else "HMC")
        self._words_for = (reference_info, info, who, mass)  # the dicts kept: their ids stay theirs
        return who, mass

    def show_failure(self, message: str) -> None:
        """Say, in this column only, that its posterior could not judge the input, and why."""
        for plot in self.plots.values():
            plot.clear_view()
        self.verdict.set_paragraphs([((("Could not judge this input.", "b"), (f" {message}", "")), WARNING)])
        self._failed = True
        self._fit_verdict()

    def clear_column(self, message: str = "") -> None:
        """Empty plots and ``message``; a column whose weights are still being read says so instead."""
        for plot in self.plots.values():
            plot.clear_view()
        self.verdict.setText(WAITING_NOTE if self._waiting else message)
        if self._failed:
            self._failed = False
            self._fit_verdict()
