"""The Help menu's texts: how to read the window, and the About box with the versions."""

from __future__ import annotations

ABOUT_TITLE = "About bayescope"

HOW_TO_READ = """
<h3>How to read this window</h3>
<p>A classifier trained on images does not give one answer: a <b>posterior</b> is a whole
family of plausible models (its <i>draws</i>), and each draw gives every class a probability.
Each column is one way of building that family (the method is named in its header), judging the
same input side by side.</p>
<p><b>Draws per class.</b> One row per class. Shading (or one tick per draw, when there are
few) shows where the draws put that class's probability, from 0 to 1. The diamond is the
average and the line the credible interval. A wide row means the models disagree.</p>
<p><b>Mean probability and interval.</b> The average probability per class, with the range
that holds the chosen share of draws (the Interval box). The red bar is the predicted class.</p>
<p><b>Uncertainty (nats).</b> Total = aleatoric + epistemic, measured as entropy in nats
(0 = certain; the dashed line ln K is the most possible, every class equally likely).
<i>Aleatoric</i>: each model on its own finds the input ambiguous, like a 4 that could be a 9;
more training data would not help. <i>Epistemic</i>: the models disagree with each other,
typically because the input is unlike anything seen in training; more data would help.</p>
<p><b>Variance per class.</b> The same split for each class's probability: green is the
ambiguity within models, purple the disagreement between them.</p>
<p><b>Class correlation.</b> Blue squares mark pairs of classes that trade belief between
draws: when one model favours the first class, it takes probability from the second.</p>
<p><b>Overlap flag.</b> Under each header: how much the draws of the two most likely classes
overlap (0 = apart, 1 = the same). Above 0.5 the input is flagged as uncertain.</p>
<p><b>Rotate.</b> Turn a digit or letter with the slider, or press <i>Sweep</i> to see
belief and uncertainty across 0–180° in the Rotation sweep tab.</p>
<p><b>Export.</b> Right-click any plot (or use the ⋯ menu of a column) to save it as PNG or
SVG with its numbers as CSV and JSON; File → Export comparison writes everything at once.</p>
"""


def about_text() -> str:
    from importlib.metadata import PackageNotFoundError, version

    def v(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    import PySide6
    import torch

    rows = [("bayescope", v("bayescope")), ("torch", torch.__version__), ("PySide6", PySide6.__version__),
            ("pyqtgraph", v("pyqtgraph")), ("numpy", v("numpy")), ("Pillow", v("pillow"))]
    import platformdirs

    rows.append(("log file", str(platformdirs.user_log_dir("bayescope")) + "/bayescope.log"))
    table = "".join(f"<tr><td>{name}</td><td>{ver}</td></tr>" for name, ver in rows)
    return (
        "<p><b>bayescope</b> shows how much an image classifier knows and how much it only "
        "guesses, with MC dropout, SG-MCMC, HMC and variational posteriors side by side.</p>"
        f"<table>{table}</table>"
    )
