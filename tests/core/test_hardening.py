"""Issue 20, hardening of the engine and the command line: one test (or a few) per failure.

1. EXIF orientation; 2. posteriors that load but cannot predict; 3. tracebacks in train,
predict and evaluate; 4. strict ``evaluation.json``; 5. IDX headers checked against the
file's size; 6. untrusted text on the terminal; 7. misleading words; 8. ``--out`` links and
``X.gz`` beside a different ``X``. The rows of docs/reliability.md name these tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from core.commands.main import main
from core.engine.data.datasets import load_split
from core.engine.data.preprocess import EmptyDrawingError, load_image
from core.engine.faces.photo import load_photo

ORIENTATION = 0x0112


def _one_line_error(capsys) -> str:
    """The single ``error: …`` line on stderr, with no traceback."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines, "expected an error message"
    assert "Traceback" not in err, err
    line = lines[-1]
    assert line.startswith("error: ") and len([x for x in lines if x.startswith("error: ")]) == 1, err
    return line


@pytest.fixture(scope="module")
def seven(shared_data) -> np.ndarray:
    """MNIST's first test image (a 7) as a dark-on-light uint8 picture, as a phone would take it."""
    data = load_split("mnist", "test", root=shared_data)
    assert int(data.y[0]) == 7
    return 255 - (data.x[0, 0].numpy() * 255).round().astype(np.uint8)


# ============================================================== 1. EXIF orientation


def _sideways_with_tag(picture: np.ndarray, path: Path) -> Path:
    """Store ``picture`` turned a quarter left, tagged "rotate 90° clockwise to view" (6)."""
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    Image.fromarray(picture).transpose(Image.Transpose.ROTATE_90).save(path, exif=exif.tobytes())
    return path


def test_exif_orientation_is_applied_by_the_one_image_reader(seven, tmp_path):
    upright = tmp_path / "upright.png"
    Image.fromarray(seven).save(upright)
    tagged = _sideways_with_tag(seven, tmp_path / "tagged.png")
    assert not np.array_equal(np.asarray(Image.open(tagged)), seven)  # stored sideways indeed
    np.testing.assert_array_equal(load_image(tagged), load_image(upright))
    # the face mode's reader goes through the same helper
    np.testing.assert_array_equal(load_photo(tagged), load_photo(upright))


def test_predict_judges_a_tagged_photo_upright(seven, tmp_path, capsys):
    results = {}
    for name, path in (("upright", tmp_path / "upright.png"), ("tagged", tmp_path / "tagged.png")):
        if name == "upright":
            Image.fromarray(seven).save(path)
        else:
            _sideways_with_tag(seven, path)
        assert main(["predict", str(path), "--samples", "30", "--json"]) == 0
        results[name] = json.loads(capsys.readouterr().out)
    assert results["tagged"]["predicted_class"] == 7
    assert results["tagged"]["classes"] == results["upright"]["classes"]


# ============================================================== 7. misleading words


@pytest.mark.parametrize("fmt", ["GIF", "TIFF"])
def test_a_blank_first_frame_is_named_not_called_empty(fmt, seven, tmp_path, capsys):
    blank = Image.fromarray(np.full_like(seven, 255))
    digit = Image.fromarray(seven)
    path = tmp_path / f"frames.{fmt.lower()}"
    shifted = Image.fromarray(np.roll(seven, 3, axis=1))  # GIF merges equal frames: all differ
    blank.save(path, format=fmt, save_all=True, append_images=[digit, shifted])
    with pytest.raises(EmptyDrawingError, match="the first of its 3 frames is blank"):
        load_image(path)
    assert main(["predict", str(path)]) == 2
    assert "the first of its 3 frames is blank" in _one_line_error(capsys)
    # one frame that is blank is still plainly empty
    blank.save(tmp_path / "one.gif")
    assert main(["predict", str(tmp_path / "one.gif")]) == 2
    assert "the image is empty" in _one_line_error(capsys)
