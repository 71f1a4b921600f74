"""Colours and pyqtgraph defaults shared by the plots."""

from __future__ import annotations

import pyqtgraph as pg

BACKGROUND = "#ffffff"
FOREGROUND = "#333333"
BAR = (91, 133, 196)
BAR_TOP = (214, 96, 77)
MEAN = (20, 20, 20)
BAND = (91, 133, 196, 60)
UNCERTAINTY = {"total": (120, 120, 120), "aleatoric": (77, 175, 74), "epistemic": (152, 78, 163)}


def configure() -> None:
    pg.setConfigOptions(antialias=True, background=BACKGROUND, foreground=FOREGROUND)
