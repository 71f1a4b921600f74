"""``bayescope-cli import``: a network trained elsewhere saved as a MAP posterior, which every view
shows and Laplace and SWAG can start from (``train --method laplace --start-from MAP.pt``):

- a built-in architecture and its ``state_dict`` (``--arch``, ``--weights``), or, with
  ``--mc-dropout``, the MC dropout posterior of a network trained with dropout;
- any image classifier saved as TorchScript or as a ``torch.export`` program (``--network``),
  split at its last linear layer: a MAP posterior over that layer, which predicts on images as the
  network does, and from which ``zoo --tier features`` builds every method on the same head."""

from __future__ import annotations

import argparse
import math

from core.commands.console import say
from core.engine.files import check_output_file
from core.engine.import_weights import (
    TORCHVISION_ARCHITECTURES,
    import_network,
    import_own_network,
    read_class_names,
)
from core.engine.models import ARCHITECTURES, IMPORTED_ARCHITECTURES
from core.engine.store import save_posterior


def _numbers(text: str | None, option: str) -> tuple[float, ...]:
    if not text:
        return ()
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"{option} takes numbers separated by commas (one per channel), got {text!r}") from None
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{option} takes finite numbers, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--network", metavar="NET.pt|NET.pt2",
                        help="any image classifier saved with torch.jit.save (.pt) or torch.export.save (.pt2), "
                             "split at its last linear layer; what it reads (--image-size, --mean, --std, --classes) "
                             "may instead be in NET.json beside it: {\"image_size\": 64, \"mean\": [..], "
                             "\"std\": [..], \"classes\": [..]}")
    parser.add_argument("--head", metavar="NAME",
                        help="--network: the name of its last linear layer, when it has several that could be")
    parser.add_argument("--arch", metavar="NAME",
                        help=f"the network's architecture: {', '.join(ARCHITECTURES + IMPORTED_ARCHITECTURES)} "
                             "(resnet18: torchvision's, its batch norms folded into its convolutions; other "
                             f"torchvision ones such as {TORCHVISION_ARCHITECTURES[0]} are refused with the reason)")
    parser.add_argument("--weights", metavar="W.pt",
                        help="its state_dict, saved with torch.save(model.state_dict(), 'W.pt')")
    parser.add_argument("--classes", metavar="names.txt",
                        help="the class names, one per line, in the order of the network's outputs")
    parser.add_argument("--image-size", type=int, metavar="N",
                        help="side of the square images it reads (default 28 grey, 32 colour, 224 for resnet18)")
    parser.add_argument("--channels", type=int, choices=(1, 3),
                        help="1 grey, 3 colour (default: read from the first convolution, else 1)")
    parser.add_argument("--hidden", type=int, help="mlp: hidden width (default: read from the weights)")
    parser.add_argument("--drop-rate", type=float, default=0.0,
                        help="dropout rate of its dropout layers (kept for MC dropout; default 0)")
    parser.add_argument("--mc-dropout", action="store_true",
                        help="save it as an MC dropout posterior (its dropout layers on at prediction; "
                             "needs --drop-rate) instead of a MAP")
    parser.add_argument("--mean", metavar="M1,M2,M3",
                        help="per-channel mean it standardised its inputs (in [0, 1]) with, if any")
    parser.add_argument("--std", metavar="S1,S2,S3", help="per-channel standard deviation, with --mean")
    parser.add_argument("--out", required=True, metavar="MAP.pt", help="where to write the MAP posterior")


def run(args: argparse.Namespace) -> int:
    mean, std = _numbers(args.mean, "--mean"), _numbers(args.std, "--std")
    if getattr(args, "network", None):
        return _run_network(args, mean, std)
    if bool(mean) != bool(std):
        raise ValueError("give --mean and --std together (one number per channel each)")
    missing = [o for o, v in (("--arch", args.arch), ("--weights", args.weights), ("--classes", args.classes)) if not v]
    if missing:
        raise ValueError(f"give {', '.join(missing)} (a built-in architecture, its state_dict and its class names), "
                         "or --network for a network saved as TorchScript or torch.export")
    if getattr(args, "head", None):
        raise ValueError("--head names the last linear layer of a --network; a built-in architecture's is known")
    check_output_file(args.out, "the posterior")
    names = read_class_names(args.classes)
    posterior = import_network(args.arch, args.weights, names, image_size=args.image_size, channels=args.channels,
                               drop_rate=args.drop_rate, hidden=args.hidden, mean=mean, std=std,
                               mc_dropout=args.mc_dropout)
    path = save_posterior(posterior, args.out)
    arch = posterior.arch
    say(f"imported a {arch.name} of {arch.parameter_count():,} weights ({len(names)} classes, "
        f"{'colour' if arch.channels == 3 else 'grey'} {arch.image_size}×{arch.image_size}) as "
        f"{'an MC dropout' if args.mc_dropout else 'a MAP'} posterior: {path}")
    return 0


def _run_network(args: argparse.Namespace, mean: tuple[float, ...], std: tuple[float, ...]) -> int:
    """``import --network``: a TorchScript or torch.export classifier as a MAP over its last layer."""
    given = [o for o, v in (("--arch", args.arch), ("--weights", args.weights), ("--channels", args.channels),
                            ("--hidden", args.hidden), ("--mc-dropout", args.mc_dropout)) if v]
    if given:
        raise ValueError(f"--network reads the whole network from its file; leave out {', '.join(given)}")
    check_output_file(args.out, "the posterior")
    names = read_class_names(args.classes) if args.classes else ()
    posterior, split = import_own_network(args.network, head=args.head, image_size=args.image_size, mean=mean,
                                          std=std, class_names=names)
    path = save_posterior(posterior, args.out)
    wanted = split.input
    say(f"imported {split.path.name} ({'TorchScript' if split.format == 'torchscript' else 'torch.export'}), split at "
        f"its last linear layer {split.head}: {split.feature_dim} features → {len(wanted.class_names)} classes, "
        f"{'colour' if wanted.channels == 3 else 'grey'} {wanted.image_size}×{wanted.image_size}; saved as a MAP "
        f"posterior over that layer: {path}")
    say(f"every method on that layer: bayescope-cli zoo --tier features --network {args.network} --dataset FOLDER "
        "--out DIR")
    return 0
