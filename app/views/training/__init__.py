"""The training dialog (:class:`TrainingDialog`, a composer of panels) and the status bar's word
on a run going on behind it (:class:`RunIndicator`)."""

from __future__ import annotations

from app.views.training.dialog import TrainingDialog
from app.views.training.fields import ScientificSpinBox
from app.views.training.indicator import RunIndicator

__all__ = ["RunIndicator", "ScientificSpinBox", "TrainingDialog"]
