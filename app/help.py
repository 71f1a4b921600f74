"""The Help menu's texts: how to read the window, the Dataset tab's measures, and the About box.

:data:`DATASET_TERMS` is the one place the Dataset tab's measures are put in words: their
tooltips (``app.plots.dataset_plots``, ``app.views.dataset_tables``) and their help sections
(:data:`DATASET_HELP`) read it.
"""

from __future__ import annotations

from dataclasses import dataclass

ABOUT_TITLE = "About bayescope"

HOW_TO_READ = """
<h3>How to read this window</h3>
<p>A classifier trained on images does not give one answer: a <b>posterior</b> is a whole
family of plausible models (its <i>draws</i>), and each draw gives every class a probability.
Each column is one way of building that family (the method is named in its header), judging the
same input side by side.</p>
<a name="histograms"></a><p><b>Draws per class.</b> One row per class. Shading (or one tick per draw, when there are
few) shows where the draws put that class's probability, from 0 to 1; the scale at its right
goes from none of the class's draws (white) to all of them (dark blue), in square-root steps so
that a few draws show (a quarter of them is halfway). The diamond is the average and the line
the credible interval. A wide row means the models disagree.</p>
<a name="interval"></a><p><b>Mean probability and interval.</b> The average probability per class, with the range
that holds the chosen share of the posterior (the Interval box) on average. With too few draws
for that share the title says what the interval really holds: from 8 draws even the widest
interval holds 78%, not 90% (19 draws give 90%). The red bar is the predicted class.</p>
<p><b>Black marks: exact inference.</b> The posteriors of the <i>softmax regression, every
method</i> set (Add posterior) share one model, data set and prior, so they differ in method
only. For that model HMC with converged chains is as close to exact Bayesian inference as there
is; on every other column of the set its average (—) and interval (thin line right of each bar)
are drawn in black, and the verdict says what it reads and how far the column is from it. When
HMC's own chains have not converged the verdict says so ("HMC (not converged, R̂ …)"): its marks
are then one more approximation, not the exact answer.</p>
<a name="entropy"></a><p><b>Uncertainty (nats).</b> Total = aleatoric + epistemic, measured as entropy in nats
(0 = certain; the dashed line ln K is the most possible, every class equally likely).
<i>Aleatoric</i>: each model on its own finds the input ambiguous, like a 4 that could be a 9;
more training data would not help. <i>Epistemic</i>: the models disagree with each other,
typically because the input is unlike anything seen in training; more data would help. From few
draws it reads low. For D-SGHMC, which drops random input pixels when it predicts, it is shown
in two: <i>weights</i> (the models disagree) and <i>input masks</i> (noise of the dropped
pixels, which no data removes).</p>
<a name="variance"></a><p><b>Variance per class.</b> The same split for each class's probability: green is the
ambiguity within models, purple the disagreement between them.</p>
<a name="correlation"></a><p><b>Class correlation.</b> Blue squares mark pairs of classes that trade belief between
draws: when one model favours the first class, it takes probability from the second.</p>
<p><b>Overlap flag.</b> Under each header: how much the draws of the two most likely classes
overlap (0 = apart, 1 = the same). Above 0.5 the input is flagged as uncertain.</p>
<a name="chains"></a><p><b>Did the chains agree?</b> A sampler (SGHMC, HMC …) runs several chains from different
starting weights. Hover a column's title: it lists the chains, the draws, <i>R̂</i> (1.00 when the
chains agree; aim for 1.01, above 1.1 they disagree) and <i>ESS</i> (how many independent draws
the stored ones are worth). A column whose chains disagree says so in red under its title; its
⋯ menu → <i>Diagnostics…</i> shows each chain's trace and R̂ for each class.</p>
<p><b>What the red line means for you.</b> <i>“The chains disagree: this posterior may not have
converged”</i>: its chains ended in different places, so its draws are not yet a fair sample of
the posterior. Its spread (the shading, the intervals, the epistemic part) may be too wide or too
narrow, and its average can move too: read them as a rough guess, and compare with the columns
without the line (in the <i>softmax regression, every method</i> set, exact inference, HMC, is
the one to trust). <i>“Too few draws to tell whether the chains agree”</i>: the chains may well
agree, but the draws are too few to show it. What to do: sample for longer. Posterior → <i>Train a
posterior…</i> with more epochs trains it again, and a new file
says whether its chains now agree. For a network this can take many times the first run: the
bundled network samplers keep their red lines on purpose, to show what a sampler that has not
converged looks like.</p>
<p><b>Rotate.</b> Turn a digit or letter with the slider, or press <i>Sweep</i> to see
belief and uncertainty across 0–180° in the Sweep tab. Choose a corruption instead of the rotation
(Gaussian noise, blur, contrast, a grey patch, a shift) to corrupt the image with the severity
slider and sweep its severity from 0 to 5 (or move the patch across the image).</p>
<p><b>Export.</b> Right-click any plot (or use the ⋯ menu of a column) to save it as PNG or
SVG with its numbers as CSV and JSON; File → Export comparison writes everything at once.</p>
"""


@dataclass(frozen=True)
class Term:
    """A measure of the Dataset tab: what it means, and what good looks like (which way is better)."""

    title: str
    means: str
    good: str

    @property
    def tooltip(self) -> str:
        return f"{self.means} {self.good}"


#: The Dataset tab's measures, keyed by the label they carry on screen (metric rows) or by view.
DATASET_TERMS: dict[str, Term] = {
    "Log loss": Term(
        "Log loss (NLL, negative log-likelihood)",
        "The average of −log(probability the posterior gave the true class): it punishes confident "
        "mistakes the most (a true class given 1% costs 4.6, one given 50% costs 0.69).",
        "Lower is better: 0 would be every true class given 100%; on MNIST a good posterior scores "
        "below 0.1, and always guessing 1 in 10 scores 2.3.",
    ),
    "Brier": Term(
        "Brier score",
        "The average squared distance between the probabilities and the true answer (1 for the true "
        "class, 0 for the others), summed over the classes.",
        "Lower is better: 0 = certain and right every time, 2 = certain and wrong every time; on MNIST "
        "a good posterior scores below 0.05.",
    ),
    "ECE": Term(
        "ECE (expected calibration error)",
        "The images are grouped by confidence (the highest mean probability, 15 groups); in each group "
        "the gap between the confidence and how often the posterior is right, averaged with the "
        "groups' sizes as weights.",
        "Lower is better: 0 means “90% sure” is right 90% of the time, so its confidence can be taken at "
        "its word; below 0.02 is good.",
    ),
    "Classwise ECE": Term(
        "Classwise ECE",
        "The calibration error of every class's probability, not only the top one (does “20% a 7” "
        "come true 20% of the time?), averaged over the classes.",
        "Lower is better: 0 = every probability can be taken at its word; it is usually smaller than "
        "the ECE, and below 0.01 on MNIST for a good posterior.",
    ),
    "SmoothECE": Term(
        "SmoothECE (calibration error without bins)",
        "The gap between confidence and how often the posterior is right, smoothed by a kernel whose "
        "width the data choose (Błasiok & Nakkiran 2023), so no choice of groups moves it as it moves the ECE.",
        "Lower is better: 0 = calibrated; close to the ECE when the ECE's groups happen to fit the data.",
    ),
    "Set size": Term(
        "Conformal set size",
        "The mean number of classes in the conformal sets at 90 % (adaptive sets, APS), on the test images "
        "that did not calibrate them: how many classes the posterior needs to name to keep its guarantee.",
        "Lower is better, at the guaranteed coverage: 1.0 would be one class per image.",
    ),
    "Set coverage": Term(
        "Conformal coverage",
        "How often the conformal set held the true class, on the half of the test images that did not "
        "calibrate it (the other half, chosen by a hash of each image's pixels, calibrates).",
        "No direction is better: it should lie in the guaranteed range beside it, within the sampling "
        "error of the images counted.",
    ),
    "Guaranteed": Term(
        "Guaranteed coverage",
        "What split conformal guarantees on images exchangeable with the calibration images: coverage at "
        "least 1 − α and at most 1 − α + 1/(n + 1) with n calibration images, on average over inputs, "
        "not for any one image; “–” when the posterior has no calibration yet (the column's ⋯ menu on the This input tab calibrates it).",
        "No direction is better: it is the yardstick for the coverage above it.",
    ),
    "AUROC": Term(
        "AUROC (out-of-distribution detection)",
        "How well the chosen uncertainty score tells the out-of-distribution images (e.g. notMNIST "
        "letters) from the test images: the chance that a random unfamiliar image is scored more "
        "uncertain than a random test image.",
        "Higher is better: 0.5 = chance, 1 = every unfamiliar image is flagged before any test image; "
        "above 0.9 is good.",
    ),
    "AUPR": Term(
        "AUPR (area under the precision–recall curve)",
        "The out-of-distribution images counted as the ones to find, most uncertain first: how many of "
        "those flagged are really unfamiliar, averaged over how many are found.",
        "Higher is better: 1 = the most uncertain images are all out-of-distribution; chance is the "
        "share of out-of-distribution images among all (0.5 for two sets of the same size).",
    ),
    "Chains": Term(
        "Chains",
        "A sampled posterior (SGHMC, D-SGHMC, SGLD, HMC) draws its models in independent runs, the "
        "chains; the per-class error plot shows one dot per chain and a box over them.",
        "More chains that agree is better: boxes that are narrow mean every chain found the same "
        "answer; a chain far from the others has not reached the posterior.",
    ),
    "reliability_share": Term(
        "The grey curve of the reliability diagram",
        "The share of the test images in each confidence group (the blue bars' sizes): most images sit "
        "at the right, where the posterior is sure.",
        "It says how much each bar counts: a gap on a group holding few images matters little. No "
        "direction is better; good is blue bars on the dashed diagonal where the grey curve is high.",
    ),
    "soft_diagonal": Term(
        "The diagonal of the soft confusion matrix",
        "The mean probability the posterior gives the true class, per class: the colour of the cell "
        "where the row's class meets the same class.",
        "Higher is better: near 1 on the diagonal and near 0 off it; a pale diagonal cell with a "
        "coloured neighbour in its row shows which class it is taken for.",
    ),
    "images_referred": Term(
        "Images referred (the rejection curve)",
        "The posterior hands its most uncertain images to a person; x is the share handed over, y the "
        "accuracy on the images it keeps.",
        "A curve that rises fast is better: the uncertainty points at the mistakes. The dotted curve is "
        "the best possible (every mistake handed over first); a flat curve means the uncertainty says "
        "nothing about the mistakes.",
    ),
}


def _dataset_help() -> str:
    sections = "".join(
        f"<p><b>{t.title}.</b> {t.means} <i>What good looks like:</i> {t.good}</p>" for t in DATASET_TERMS.values()
    )
    return (
        '<a name="dataset"></a><h3>The Dataset tab: a whole test set</h3>'
        "<p>Every column's posterior judges every image of the chosen test set (and, optionally, an "
        "out-of-distribution set: images of something it never saw). Hover a number or a plot for "
        "the same words.</p>" + sections
    )


DATASET_HELP = _dataset_help()


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
