from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The development copies of the data sets (../shared/data beside the checkout)."""
    if not (SHARED_DATA / "mnist").is_dir():
        pytest.skip(f"shared data sets not found at {SHARED_DATA}")
    return SHARED_DATA
