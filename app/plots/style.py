"""Colours and pyqtgraph defaults shared by the plots."""

from __future__ import annotations

import pyqtgraph as pg

BACKGROUND = "#ffffff"
FOREGROUND = "#333333"
BAR = (91, 133, 196)
BAR_TOP = (214, 96, 77)
MEAN = (20, 20, 20)
BAND = (91, 133, 196, 60)
GRID = (150, 150, 150)
UNCERTAINTY = {"total": (120, 120, 120), "aleatoric": (77, 175, 74), "epistemic": (152, 78, 163),
               # D-SGHMC's epistemic part in two: its weights (the epistemic colour) and the
               # input masks it draws at prediction (the same purple, faded: noise, not knowledge)
               "weights": (152, 78, 163), "input masks": (203, 166, 209)}
WARNING = "#b2182b"
#: Exact inference's (HMC's) marks on the plots of a tier's other methods.
REFERENCE = (0, 0, 0)


def configure() -> None:
    pg.setConfigOptions(antialias=True, background=BACKGROUND, foreground=FOREGROUND)


def sequential_lut() -> pg.ColorMap:
    """White → blue, for shares of draws (0 = white paper, so empty bins vanish)."""
    return pg.ColorMap([0.0, 0.25, 1.0], [(255, 255, 255), (170, 195, 230), (33, 80, 150)])


def diverging_lut() -> pg.ColorMap:
    """Blue (−1) → white (0) → red (+1), for correlations (as matplotlib's RdBu_r in exports)."""
    return pg.ColorMap([0.0, 0.5, 1.0], [(5, 48, 97), (247, 247, 247), (103, 0, 31)])
