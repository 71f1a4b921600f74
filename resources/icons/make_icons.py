"""Draw the bayescope icon and write it in every size the installers need.

The icon is a predictive distribution seen through a lens: histogram bars of posterior
samples under a mean curve, in a rounded square. Drawn with Pillow at 1024 px and scaled
down (small sizes get thicker strokes so they stay legible). Regenerate with
``python resources/icons/make_icons.py``; the outputs are committed.

Writes bayescope-<N>.png for N in 16 … 512, bayescope.svg (the same drawing as vectors),
bayescope.ico (Windows) and bayescope.icns (macOS).
"""

from __future__ import annotations

import math
from pathlib import Path

from PIL import Image, ImageDraw

SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
BACKGROUND_TOP = (28, 42, 74)
BACKGROUND_BOTTOM = (15, 23, 42)
BARS = (64, 196, 196)
BAR_HIGHLIGHT = (255, 196, 64)
CURVE = (245, 247, 250)

#: Bar heights as fractions: a slightly skewed bell, the tallest bar highlighted as the
#: predicted class.
HEIGHTS = (0.16, 0.34, 0.62, 0.9, 0.7, 0.4, 0.2)


def _curve_points(x0: float, x1: float, base: float, height: float, n: int = 64) -> list[tuple[float, float]]:
    centre, width = x0 + 0.46 * (x1 - x0), 0.2 * (x1 - x0)
    return [
        (x, base - height * math.exp(-0.5 * ((x - centre) / width) ** 2))
        for x in (x0 + (x1 - x0) * i / (n - 1) for i in range(n))
    ]


def draw(size: int = 1024, bold: bool = False) -> Image.Image:
    s = size / 1024
    image = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    gradient = Image.new("RGBA", (size, size))
    pen = ImageDraw.Draw(gradient)
    for y in range(size):
        t = y / max(size - 1, 1)
        pen.line([(0, y), (size, y)], fill=tuple(round(a + (b - a) * t) for a, b in zip(BACKGROUND_TOP, BACKGROUND_BOTTOM, strict=True)))
    mask = Image.new("L", (size, size), 0)
    ImageDraw.Draw(mask).rounded_rectangle((40 * s, 40 * s, 984 * s, 984 * s), radius=200 * s, fill=255)
    image.paste(gradient, (0, 0), mask)
    pen = ImageDraw.Draw(image)
    left, right, base, top = 190 * s, 834 * s, 800 * s, 200 * s
    slot = (right - left) / len(HEIGHTS)
    gap = slot * (0.12 if bold else 0.18)
    tallest = max(range(len(HEIGHTS)), key=HEIGHTS.__getitem__)
    for i, h in enumerate(HEIGHTS):
        x0 = left + i * slot + gap / 2
        colour = BAR_HIGHLIGHT if i == tallest else BARS
        pen.rounded_rectangle((x0, base - h * (base - top), x0 + slot - gap, base), radius=18 * s, fill=colour)
    points = _curve_points(left - 30 * s, right + 30 * s, base - 4 * s, 0.97 * (base - top))
    pen.line(points, fill=CURVE, width=max(1, round((56 if bold else 34) * s)), joint="curve")
    pen.line([(left - 30 * s, base + 30 * s), (right + 30 * s, base + 30 * s)], fill=CURVE,
             width=max(1, round((44 if bold else 26) * s)))
    return image


def svg() -> str:
    left, right, base, top = 190, 834, 800, 200
    slot = (right - left) / len(HEIGHTS)
    gap = slot * 0.18
    tallest = max(range(len(HEIGHTS)), key=HEIGHTS.__getitem__)
    hexcol = "#{:02x}{:02x}{:02x}".format
    bars = "\n".join(
        f'  <rect x="{left + i * slot + gap / 2:.1f}" y="{base - h * (base - top):.1f}" width="{slot - gap:.1f}" '
        f'height="{h * (base - top):.1f}" rx="18" fill="{hexcol(*(BAR_HIGHLIGHT if i == tallest else BARS))}"/>'
        for i, h in enumerate(HEIGHTS)
    )
    points = " ".join(f"{x:.1f},{y:.1f}" for x, y in _curve_points(left - 30, right + 30, base - 4, 0.97 * (base - top)))
    return f"""<svg xmlns="http://www.w3.org/2000/svg" width="1024" height="1024" viewBox="0 0 1024 1024">
  <defs><linearGradient id="bg" x1="0" y1="0" x2="0" y2="1">
    <stop offset="0" stop-color="{hexcol(*BACKGROUND_TOP)}"/><stop offset="1" stop-color="{hexcol(*BACKGROUND_BOTTOM)}"/>
  </linearGradient></defs>
  <rect x="40" y="40" width="944" height="944" rx="200" fill="url(#bg)"/>
{bars}
  <polyline points="{points}" fill="none" stroke="{hexcol(*CURVE)}" stroke-width="34" stroke-linejoin="round" stroke-linecap="round"/>
  <line x1="{left - 30}" y1="{base + 30}" x2="{right + 30}" y2="{base + 30}" stroke="{hexcol(*CURVE)}" stroke-width="26"/>
</svg>
"""


def main() -> None:
    folder = Path(__file__).parent
    big, bold = draw(1024), draw(1024, bold=True)
    images = {}
    for n in SIZES:
        source = bold if n <= 48 else big
        images[n] = source.resize((n, n), Image.Resampling.LANCZOS)
        images[n].save(folder / f"bayescope-{n}.png", optimize=True)
    (folder / "bayescope.svg").write_text(svg())
    images[256].save(folder / "bayescope.ico", sizes=[(n, n) for n in (16, 24, 32, 48, 64, 128, 256)])
    big.resize((512, 512), Image.Resampling.LANCZOS).save(folder / "bayescope.icns")


if __name__ == "__main__":
    main()
