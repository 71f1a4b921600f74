"""A column's Diagnostics window: did its chains agree? It shows what the posterior's file
records (``info["traces"]``, kept while sampling, and ``info["diagnostics"]``, written by training
or ``bayescope-cli diagnose``); it never computes."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QVBoxLayout, QWidget

from app.plots.convergence_plots import TRACE_TIP, RhatPlot, TracePlot
from app.views.column import HELP_LINK, warning_html
from core.engine.naming import convergence_lines, level_line, widening_line

#: Said of a stochastic-gradient sampler's log posterior trace, which is no exact value.
MINI_BATCH_TIP = (
    "This sampler sees one mini-batch of images per step, so each point is that mini-batch's "
    "estimate of the log posterior, scaled up to the whole training set: it scatters widely "
    "around the real value, and may even lie above the posterior's peak.")

#: Which per-chain trace to show, best first.
TRACE_NAMES = {"log_posterior": "log posterior", "param_norm": "weight norm ‖θ‖"}


class DiagnosticsWindow(QDialog):
    """Signals: help_requested(str anchor), when the red line's "What this means" is clicked."""

    help_requested = Signal(str)

    def __init__(self, posterior, title: str, class_names: tuple[str, ...], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Diagnostics: {title}")
        self.resize(720, 640)
        info = posterior.info if isinstance(posterior.info, dict) else {}
        layout = QVBoxLayout(self)
        heading = QLabel(f"<b>{html.escape(title)}</b>")
        layout.addWidget(heading)
        warning = warning_html(info)
        self.warning = QLabel(warning or "")
        self.warning.setVisible(bool(warning))
        self.warning.setWordWrap(True)
        self.warning.setOpenExternalLinks(False)
        self.warning.linkActivated.connect(lambda link: self.help_requested.emit(link.removeprefix(HELP_LINK)))
        layout.addWidget(self.warning)
        config = posterior.config if isinstance(getattr(posterior, "config", None), dict) else {}
        # how probable its draws are under the exact posterior, and what SGLD's step does to them
        exact = [line for line in (level_line(posterior.method, info), widening_line(posterior.method, config)) if line]
        lines = convergence_lines(posterior) + exact
        self.summary = QLabel("<br>".join(html.escape(line) for line in lines))
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        layout.addWidget(self.summary)

        self.trace = TracePlot()
        traces = info.get("traces") if isinstance(info.get("traces"), dict) else {}
        key = next((k for k in TRACE_NAMES if traces.get(k)), None)
        steps, burn_in, shaded, unit, along = info.get("num_steps"), info.get("burn_in_steps"), "burn-in", "step", "step"
        if steps is None and "num_warmup" in config:  # HMC: its warm-up, then its sampling iterations
            steps = int(config["num_warmup"]) + int(config.get("num_samples", 0))
            burn_in, shaded, unit = int(config["num_warmup"]), "warm-up", "iteration"
            leapfrog = config.get("num_leapfrog")
            along = f"iteration ({leapfrog} leapfrog steps each)" if leapfrog else unit
            if leapfrog and float(config.get("trajectory_length") or 0) > 0:  # steps per chain from its ε
                along = f"iteration (up to {leapfrog} leapfrog steps each)"
        name = TRACE_NAMES.get(key, "")
        if key == "log_posterior" and info.get("num_steps") is not None:  # a mini-batch sampler's, not exact
            name = "log posterior (mini-batch)"
            self.trace.setToolTip(TRACE_TIP + " " + MINI_BATCH_TIP)
        self.trace.show_traces(traces.get(key) if key else None, steps, burn_in, name, shaded, along)
        self.trace.getPlotItem().setTitle(f"Each chain against the {unit}")
        layout.addWidget(self.trace, 1)

        self.rhat = RhatPlot(tuple(class_names))
        record = info.get("diagnostics") if isinstance(info.get("diagnostics"), dict) else {}
        per_class = record.get("rhat_per_class") if record.get("status") == "measured" else None
        note = "" if per_class else (
            f"n/a: {record.get('reason', '')}" if record.get("status") == "n/a"
            else "Not measured: bayescope-cli diagnose FILE adds it")
        self.rhat.show_rhat(per_class, note)
        self.rhat.getPlotItem().setTitle("Do the chains agree on each class? (R̂ per class)")
        layout.addWidget(self.rhat, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
