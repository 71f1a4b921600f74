"""``bayescope-cli compare``: judge one image with several posteriors and write a report folder."""

from __future__ import annotations

import argparse
import dataclasses

from core.analysis.comparison import compare
from core.commands.console import add_device_argument, chosen_device, say
from core.engine.naming import convergence_warning
from core.outputs.comparison import check_output_folder, write_comparison
from core.outputs.export import FIGURE_FORMATS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bayescope-cli compare``."""
    parser.add_argument("image", help="PNG/JPEG of a digit, or SET:INDEX of a test image (e.g. mnist-test:0); "
                                      "for posteriors of your own images, a photo (read as their training images were)")
    parser.add_argument("--posterior", nargs="+", metavar="P",
                        help="posterior file(s), one column each (default: the bundled Laplace LeNet-5)")
    parser.add_argument("--samples", type=int, default=100, help="posterior samples S per column")
    parser.add_argument("--level", type=float, default=0.9, help="credible interval level")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", help="folder holding the data set named in SET:INDEX")
    parser.add_argument("--format", nargs="+", default=["png", "svg"], choices=FIGURE_FORMATS,
                        help="figure formats (default: png svg)")
    parser.add_argument("--out", required=True, help="output folder (a previous comparison there is replaced)")
    add_device_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Carry out ``bayescope-cli compare``: print one line per column; return the exit code."""
    from core.analysis.evaluation import resolve_image
    from core.engine.data.images import open_photo, reads_photos
    from core.engine.resources import default_posterior_path
    from core.engine.store import load_posterior

    if args.samples < 1:
        raise ValueError("--samples must be at least 1")
    if not 0 < args.level < 1:
        raise ValueError("--level must lie strictly between 0 and 1 (e.g. 0.9)")
    device = chosen_device(args)
    check_output_folder(args.out)  # before any work: a refused folder should fail fast
    paths = args.posterior or [str(default_posterior_path())]
    loaded = [(load_posterior(path, device=device), str(path)) for path in paths]
    if all(reads_photos(p.arch) for p, _ in loaded):  # your own images: the photo as their training read it
        image = open_photo(args.image)
    else:
        _, image = resolve_image(args.image, args.data_dir)
    comparison = compare(loaded, image, num_samples=args.samples, level=args.level, seed=args.seed)
    comparison = dataclasses.replace(comparison, input_label=str(args.image))  # named on the page and in provenance.json
    written = write_comparison(comparison, args.out, args.format)
    width = max(len(c.title) for c in comparison.columns)
    for column in comparison.columns:
        s = column.prediction.summary
        k = s.predicted_class
        flag = "  uncertain (top two overlap)" if s.uncertain else ""
        warning = convergence_warning(column.posterior.info)
        if warning:
            flag += f"  {warning[0].lower()}{warning[1:].rstrip('.')}"
        say(f"{column.title:{width}s}  class {comparison.class_names[k]}  mean {float(s.mean[k]):.3f}{flag}")
    say(f"wrote {len(written)} files to {args.out} (open index.html)")
    return 0
