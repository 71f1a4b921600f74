"""The colours and words the window and the exported figures share, so that a saved figure looks
like the window: one table, read by ``app.plots.style`` (pyqtgraph) and by the matplotlib figures.

Colours are 0–255 RGB tuples; :func:`mpl` turns one into matplotlib's 0–1 form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.analysis.metrics import RotationSweep

#: The uncertainty parts. Epistemic is purple, never red: red is class 3's colour in
#: :data:`CLASS_COLOURS`, and a person would read a red epistemic line as that class.
UNCERTAINTY: dict[str, tuple[int, int, int]] = {
    "total": (120, 120, 120),
    "aleatoric": (77, 175, 74),
    "epistemic": (152, 78, 163),
    # D-SGHMC's epistemic part in two: its weights (the epistemic colour) and the input masks
    # it draws at prediction (the same purple, faded: noise, not knowledge)
    "weights": (152, 78, 163),
    "input masks": (203, 166, 209),
}
#: One colour per class (matplotlib's tab10), in class order, repeating after ten.
CLASS_COLOURS: tuple[tuple[int, int, int], ...] = (
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
)
#: The interval view's bars, the predicted class's bar, and the whiskers (window and export).
BAR = (91, 133, 196)
BAR_TOP = (214, 96, 77)
MEAN = (20, 20, 20)

#: The heat maps' colour maps as (position 0–1, RGB) stops, drawn alike by the window and the
#: exported figures. Sequential, for shares and mean probabilities (0 = white paper, so empty
#: cells vanish); the confusion matrices colour by the square root of the value (a few % stay
#: visible beside a diagonal near 1), so their scales carry the same square-root ticks.
SEQUENTIAL: tuple[tuple[float, tuple[int, int, int]], ...] = (
    (0.0, (255, 255, 255)), (0.25, (170, 195, 230)), (1.0, (33, 80, 150)))
#: Diverging, for correlations −1 (blue) … 0 (white) … +1 (red): ColorBrewer's RdBu, reversed,
#: the colours matplotlib's "RdBu_r" is built from.
DIVERGING: tuple[tuple[float, tuple[int, int, int]], ...] = tuple(
    (i / 10, colour) for i, colour in enumerate((
        (5, 48, 97), (33, 102, 172), (67, 147, 195), (146, 197, 222), (209, 229, 240), (247, 247, 247),
        (253, 219, 199), (244, 165, 130), (214, 96, 77), (178, 24, 43), (103, 0, 31))))
#: Where the confusion matrices' colour scales are labelled: the values, drawn at their square roots.
SQRT_SCALE_TICKS: tuple[float, ...] = (0.0, 0.05, 0.25, 1.0)


def mpl_colour_map(stops: tuple[tuple[float, tuple[int, int, int]], ...], name: str):
    """A matplotlib colour map of ``stops`` (imported here: the window reads this module too)."""
    from matplotlib.colors import LinearSegmentedColormap

    return LinearSegmentedColormap.from_list(name, [(at, mpl(colour)) for at, colour in stops])


def mpl(colour: tuple[int, ...]) -> tuple[float, ...]:
    """A 0–255 RGB(A) tuple as matplotlib's 0–1 tuple."""
    return tuple(c / 255.0 for c in colour)


def class_colour(k: int) -> tuple[int, int, int]:
    return CLASS_COLOURS[k % len(CLASS_COLOURS)]


def sweep_band_words(sweep: RotationSweep) -> str:
    """The band's level as it really holds at this number of draws ("90% band", "no band from 1 draw")."""
    held = sweep.expected_coverage
    if held is None or held >= sweep.level:
        return f"{sweep.level * 100:g}% band"
    if held == 0:  # one draw: the band is the line itself
        return "no band from 1 draw"
    return f"{100 * held:.0f}% band, {sweep.level * 100:g}% asked"


def sweep_probability_words(sweep: RotationSweep) -> tuple[str, ...]:
    """What the sweep's class-probability plot draws, longest wording first (the window fits one).

    The line is the mean p̄ over the draws, the number *This input* leads with, so the two agree
    at 0°; the band is the credible interval.
    """
    band = sweep_band_words(sweep)
    return (
        f"Class probability: mean of the draws (line), {band}",
        f"Mean probability (line), {band}",
        f"Mean p̄, {band}",
    )
