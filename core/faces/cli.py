"""``bayescope-cli predict PHOTO --task age``: find the face, describe it, predict its age group.

Called by :mod:`core.cli` after the shared arguments are checked. Every failure a person can
cause (no face, a face under 40 pixels, a posterior of digits, a head trained on another
descriptor, a missing descriptor package, an unreadable or oversized image) is a one-line
error; grey-scale, CMYK, 16-bit and transparent images are read as photos, upright by their
EXIF orientation.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from core.faces.age_groups import AGE_GROUP_NAMES
from core.faces.descriptor import MIN_FACE_SIZE, FaceTooSmallError, NoFaceError, get_descriptor
from core.faces.heads import check_descriptor, expected_age_group, predict_age
from core.faces.photo import load_photo
from core.io import load_posterior
from core.resources import resources_dir
from core.uncertainty import summarise

#: The bundled head ``predict --task age`` uses when no posterior is given.
DEFAULT_FACE_POSTERIOR = "face_sghmc.pt"


def default_face_posterior_path() -> Path:
    return resources_dir() / "models" / DEFAULT_FACE_POSTERIOR


def describe_photo(path: str | Path, face: int = 1, descriptor: str | None = None) -> dict[str, Any]:
    """Load a photo, detect its faces and describe face number ``face`` (1 = largest).

    Returns ``{"image", "size", "faces" (boxes), "face" (1-based), "chip", "descriptor",
    "info"}``. Raises :class:`NoFaceError` / :class:`FaceTooSmallError` with the reason.
    """
    backend = get_descriptor(descriptor) if descriptor else get_descriptor()
    image = load_photo(path)
    h, w = image.shape[:2]
    boxes = backend.detect(image)
    if not boxes:
        if min(h, w) < MIN_FACE_SIZE:
            raise FaceTooSmallError(
                f"{path}: the image is only {w}×{h} pixels; a face must be at least {MIN_FACE_SIZE} "
                "pixels across to be found"
            )
        raise NoFaceError(
            f"{path}: no face found in the {w}×{h} image (the detector finds upright, roughly "
            f"frontal faces of at least {MIN_FACE_SIZE} pixels)"
        )
    if not 1 <= face <= len(boxes):
        raise ValueError(f"--face {face}: the image has {len(boxes)} face(s); choose 1 to {len(boxes)}")
    box = boxes[face - 1]
    try:
        chip, vector = backend.align_and_describe(image, box)
    except FaceTooSmallError as exc:
        raise FaceTooSmallError(f"{path}: {exc}") from None
    return {"image": image, "size": (w, h), "faces": boxes, "face": face, "chip": chip,
            "descriptor": vector, "info": backend.info}


def run_predict(args: argparse.Namespace) -> int:
    """``predict --task age``: print (or ``--json``) the age-group posterior of a photo."""
    face = getattr(args, "face", 1) or 1
    path = Path(args.posterior) if args.posterior else default_face_posterior_path()
    posterior = load_posterior(path)
    backend = get_descriptor()
    check_descriptor(posterior, backend.info)  # before any image work
    posterior.check_prediction(args.samples, batch_size=1)
    found = describe_photo(args.image, face)
    generator = torch.Generator().manual_seed(args.seed)
    samples = predict_age(posterior, found["descriptor"], backend.info, args.samples, generator)[:, 0]
    summary = summarise(samples, level=args.level)
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
        "groups": summary.class_records(names, key="group"),
        "uncertainty": summary.uncertainty_record(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    box = boxes[face - 1]
    print(f"{posterior.describe()}  ({summary.num_samples} samples)")
    others = f"; {len(boxes)} faces found, this is number {face} by size (--face N picks another)" if len(boxes) > 1 else ""
    print(f"face at x {box.left}–{box.right}, y {box.top}–{box.bottom} of the "
          f"{found['size'][0]}×{found['size'][1]} image{others}")
    print(f"predicted age group: {names[summary.predicted_class]} years")
    print(f"{'group':>6}  {'mean':>6}  {int(args.level * 100)}% interval")
    for row in result["groups"]:
        print(f"{row['group']:>6}  {row['mean']:6.3f}  [{row['lower']:.3f}, {row['upper']:.3f}]")
    u = result["uncertainty"]
    print(f"uncertainty (nats): total {u['total']:.4f} = aleatoric {u['aleatoric']:.4f}"
          f" + epistemic {u['epistemic']:.4f}")
    return 0
