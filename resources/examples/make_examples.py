"""Draw the bundled example digits with Pillow strokes (no data set image is used).

Regenerate with ``python resources/examples/make_examples.py``. Each file is named
``digit-<class>.png``: the self-test (``bayescope --self-test``) reads the class from the
name. The ink is dark on a light ground, like a scan, so loading them also exercises the
inversion in ``core.data.preprocess.load_image``.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

SIZE = 280
WIDTH = 26

#: Polylines and arcs in a 280×280 frame, as a person would draw them with a mouse.
STROKES: dict[int, list[tuple[str, tuple]]] = {
    # A seven: a top bar and the down-stroke in one movement.
    7: [("line", ((70, 62), (205, 58), (170, 140), (140, 222)))],
    # A three: two arcs open to the left, meeting in the middle.
    3: [
        ("arc", ((82, 40, 202, 140), 200, 90)),
        ("arc", ((78, 128, 208, 240), 270, 160)),
    ],
}


def draw_digit(label: int) -> Image.Image:
    image = Image.new("L", (SIZE, SIZE), 255)
    pen = ImageDraw.Draw(image)
    for kind, args in STROKES[label]:
        if kind == "line":
            pen.line(args, fill=0, width=WIDTH, joint="curve")
        else:
            box, start, end = args
            pen.arc(box, start, end, fill=0, width=WIDTH)
    return image


def main() -> None:
    folder = Path(__file__).parent
    for label in STROKES:
        draw_digit(label).save(folder / f"digit-{label}.png", optimize=True)


if __name__ == "__main__":
    main()
