"""Colours and pyqtgraph defaults shared by the plots."""

from __future__ import annotations

import pyqtgraph as pg

# the colours an exported figure shares with the window live in core, read by both
from core.outputs.palette import BAR as BAR
from core.outputs.palette import BAR_TOP as BAR_TOP
from core.outputs.palette import CLASS_COLOURS as CLASS_COLOURS
from core.outputs.palette import DIVERGING, SEQUENTIAL
from core.outputs.palette import MEAN as MEAN
from core.outputs.palette import UNCERTAINTY as UNCERTAINTY

BACKGROUND = "#ffffff"
FOREGROUND = "#333333"
BAND = (91, 133, 196, 60)
GRID = (150, 150, 150)
WARNING = "#b2182b"
#: Exact inference's (HMC's) marks on the plots of a tier's other methods.
REFERENCE = (0, 0, 0)


def configure() -> None:
    pg.setConfigOptions(antialias=True, background=BACKGROUND, foreground=FOREGROUND)


def _colour_map(stops) -> pg.ColorMap:
    return pg.ColorMap([at for at, _ in stops], [colour for _, colour in stops])


def sequential_lut() -> pg.ColorMap:
    """White → blue, for shares of draws (0 = white paper, so empty bins vanish); the exported
    figures draw the same map (:data:`core.outputs.palette.SEQUENTIAL`)."""
    return _colour_map(SEQUENTIAL)


def diverging_lut() -> pg.ColorMap:
    """Blue (−1) → white (0) → red (+1), for correlations: matplotlib's RdBu_r, as in the exports
    (:data:`core.outputs.palette.DIVERGING`)."""
    return _colour_map(DIVERGING)
