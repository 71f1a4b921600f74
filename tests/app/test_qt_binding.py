"""Guards against a Qt binding that corrupts reference counts (PySide6 6.12.0 did).

That release dropped a reference to ``True`` on every Python-side ``emit`` and to ``None``
on every empty QVariant it returned; a long training run or GUI session then aborted with
"deallocating True/None". pyproject excludes it; this test keeps it excluded.
"""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QComboBox


class _Emitter(QObject):
    happened = Signal(object)


def test_emit_and_empty_variants_keep_reference_counts(qtbot):
    emitter = _Emitter()
    emitter.happened.connect(lambda value: None)
    combo = QComboBox()
    qtbot.addWidget(combo)
    before = sys.getrefcount(True), sys.getrefcount(None)
    for _ in range(200):
        emitter.happened.emit(None)
        combo.currentData()
    after = sys.getrefcount(True), sys.getrefcount(None)
    assert abs(after[0] - before[0]) < 50 and abs(after[1] - before[1]) < 50
