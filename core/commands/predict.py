"""``bayescope-cli predict``: classify a digit image, or a face photo's age group (``--task age``).

A posterior trained on a person's own images (or imported with its standardisation) reads the
image as its training images were read: resized on the shorter side and centre-cropped, in
colour when it is a colour model, named by its own class names.

For a face, every failure a person can cause (no face, a face under 40 pixels, a posterior
of digits, a head trained on another descriptor, a missing descriptor package, an unreadable
or oversized image) is a one-line error; grey-scale, CMYK, 16-bit and transparent images are
read as photos, upright by their EXIF orientation.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from core.analysis.comparison import default_class_names
from core.analysis.predictive import (
    check_finite,
    input_mask_split,
    masks_inputs,
    predict_image,
    predict_input,
)
from core.analysis.uncertainty import Summary, interval_note, summarise, with_mask_split
from core.commands.console import add_device_argument, check_seed, chosen_device, say
from core.engine.data.images import photo_input, reads_photos
from core.engine.data.preprocess import (
    EmptyDrawingError,
    image_to_input,
    load_image,
)
from core.engine.faces.age_groups import AGE_GROUP_NAMES
from core.engine.faces.descriptor import (
    get_descriptor,
)
from core.engine.faces.heads import (
    as_descriptor_batch,
    check_descriptor,
    expected_age_group,
    predict_age,
)
from core.engine.faces.photo import describe_photo
from core.engine.naming import plural
from core.engine.resources import default_face_posterior_path, default_posterior_path
from core.engine.store import load_posterior


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("image", help="PNG/JPEG of a digit (any size; dark-on-light is inverted), or a photo with --task age")
    parser.add_argument("--posterior", help="posterior file (default: the bundled Laplace LeNet-5; "
                        "with --task age the bundled SGHMC face head)")
    parser.add_argument("--samples", type=int, default=100, help="posterior samples S (at least 1)")
    parser.add_argument("--level", type=float, default=0.9, help="credible interval level")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--task", choices=("digit", "age"), default="digit",
                        help="digit: classify a digit; age: find the face in a photo, predict its age group")
    parser.add_argument("--face", type=int, default=1, help="with --task age: which face, 1 = the largest")
    add_device_argument(parser)


def _digit_input(image_path: str) -> torch.Tensor:
    image = load_image(image_path)
    try:
        return image_to_input(image)
    except EmptyDrawingError:
        raise EmptyDrawingError(
            f"{image_path}: the image is empty (no ink stands out from its background); "
            "choose an image of a digit"
        ) from None


def run(args: argparse.Namespace) -> int:
    if args.samples < 1:
        raise ValueError(f"--samples must be at least 1, got {args.samples}")
    if not 0.0 < args.level < 1.0:
        raise ValueError(f"--level must lie strictly between 0 and 1, got {args.level}")
    check_seed(args.seed)
    chosen_device(args)  # before anything is read: a missing GPU is one line
    if args.task == "age":
        from core.commands.predict import run_predict

        return run_predict(args)
    path = Path(args.posterior) if args.posterior else default_posterior_path()
    posterior = load_posterior(path, device=chosen_device(args))
    if posterior.arch.input_dim:
        raise ValueError(f"{path} predicts age groups from face descriptors, not digits; use --task age")
    posterior.check_prediction(args.samples, batch_size=1)  # refuses with the memory estimate
    if reads_photos(posterior.arch):  # trained on a person's images: read as they were
        x = photo_input(args.image, posterior.arch)
        summary = predict_input(posterior, x, args.samples, seed=args.seed, level=args.level).summary
    else:
        x = _digit_input(args.image)
        summary = predict_image(posterior, x, args.samples, seed=args.seed, level=args.level).summary
    # a person's own classes (their folders' names, an imported network's list), else 0, 1, ...
    names = (list(default_class_names(posterior)) if posterior.info.get("class_names")
             else [str(k) for k in range(posterior.num_classes)])
    result = {
        "image": str(args.image),
        "posterior": str(path),
        "method": posterior.method,
        "predicted_class": summary.predicted_class,
        "num_samples": summary.num_samples,
        "credible_level": args.level,
        "expected_coverage": summary.expected_coverage,
        "classes": summary.class_records(names),
        "uncertainty": summary.uncertainty_record(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    say(f"{posterior.describe()}  ({plural(summary.num_samples, 'sample')})")
    say(f"predicted class: {names[summary.predicted_class]}")
    say_classes(summary, result["classes"], "class", 5)
    return 0


def say_classes(summary: Summary, rows: list[dict[str, Any]], key: str, width: int) -> None:
    """Each class's (``key``: class or age group) mean probability and credible interval, a note
    where the draws are too few for the interval's level, and the uncertainty in words."""
    say(f"{key:>{width}}  {'mean':>6}  {summary.interval_label}")
    for row in rows:
        say(f"{row[key]:>{width}}  {row['mean']:6.3f}  [{row['lower']:.3f}, {row['upper']:.3f}]")
    if summary.num_samples > 1 and summary.expected_coverage < summary.level:
        say(interval_note(summary.num_samples, summary.level))
    say_uncertainty(summary)


def say_uncertainty(summary: Summary) -> None:
    """The entropy split in words; for D-SGHMC, its epistemic part split into weights and input masks."""
    u = summary.uncertainty_record()
    say(f"uncertainty (nats): total {u['total']:.4f} = aleatoric {u['aleatoric']:.4f}"
        f" + epistemic {'n/a (one draw)' if u['epistemic'] is None else format(u['epistemic'], '.4f')}")
    if summary.masks is not None and u["epistemic"] is not None:
        m = summary.masks
        say(f"  epistemic = weights {m.weights:.4f} (the models disagree; more data would shrink it)"
            f" + input masks {m.input_masks:.4f} (noise of the random pixels D-SGHMC drops at"
            f" prediction; {m.masks_per_draw} masks per draw)")


def run_predict(args: argparse.Namespace) -> int:
    """``predict --task age``: print (or ``--json``) the age-group posterior of a photo."""
    face = getattr(args, "face", 1) or 1
    path = Path(args.posterior) if args.posterior else default_face_posterior_path()
    posterior = load_posterior(path, device=chosen_device(args))
    backend = get_descriptor()
    check_descriptor(posterior, backend.info)  # before any image work
    posterior.check_prediction(args.samples, batch_size=1)
    found = describe_photo(args.image, face)
    generator = torch.Generator().manual_seed(args.seed)
    samples = check_finite(predict_age(posterior, found["descriptor"], backend.info, args.samples, generator)[:, 0],
                           posterior)
    summary = summarise(samples, level=args.level)
    if masks_inputs(posterior):  # D-SGHMC: its epistemic part split into weights and input masks
        x = as_descriptor_batch(found["descriptor"], backend.info)
        summary = with_mask_split(summary, input_mask_split(posterior, x, args.samples, generator))
    names = AGE_GROUP_NAMES
    boxes = found["faces"]
    result = {
        "image": str(args.image),
        "task": "age",
        "posterior": str(path),
        "method": posterior.method,
        "descriptor": backend.info.to_dict(),
        "image_size": list(found["size"]),
        "faces_found": len(boxes),
        "face": face,
        "face_box": boxes[face - 1].to_dict(),
        "other_faces": [b.to_dict() for i, b in enumerate(boxes) if i != face - 1],
        "predicted_group": names[summary.predicted_class],
        "expected_group_index": expected_age_group(summary.mean.numpy()),
        "num_samples": summary.num_samples,
        "credible_level": args.level,
        "expected_coverage": summary.expected_coverage,
        "groups": summary.class_records(names, key="group"),
        "uncertainty": summary.uncertainty_record(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    box = boxes[face - 1]
    say(f"{posterior.describe()}  ({plural(summary.num_samples, 'sample')})")
    others = f"; {len(boxes)} faces found, this is number {face} by size (--face N picks another)" if len(boxes) > 1 else ""
    say(f"face at x {box.left}–{box.right}, y {box.top}–{box.bottom} of the "
        f"{found['size'][0]}×{found['size'][1]} image{others}")
    say(f"predicted age group: {names[summary.predicted_class]} years")
    say_classes(summary, result["groups"], "group", 6)
    return 0
