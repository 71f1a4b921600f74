"""A network of one's own on UTKFace, end to end: the demonstration of docs/zoo.md's feature tier.

1. ``bayescope-cli utkface-folders``: UTKFace's faces as eight age-group folders, ``train/`` and
   ``test/`` (the descriptor heads' split: 20 % of every group, seed 0, no photo on both sides;
   docs/faces.md).
2. A small convolutional network (four conv–batch-norm–ReLU–max-pool blocks, 16-32-64-128 channels,
   global average pooling, a 64-wide hidden layer, then its last layer ``fc`` to the eight groups)
   trained here, on this CPU, on the training split at 64 px colour, with flips and shifted crops;
   its images are decoded by bayescope's own reader (:func:`core.engine.data.images.read_image`),
   so it sees what the feature tier will feed it. The standardisation (mean and standard deviation
   per channel) is measured on the training split.
3. Saved with ``torch.jit.save`` and a sidecar ``net.json`` (image size, mean, std, class names).
4. ``bayescope-cli zoo --tier features --network net.pt --dataset FOLDER``: every method on a
   softmax-regression head over the network's 64 features, HMC first as the reference, the
   network's own last layer (``fc``) one more column; the tier's table is printed.
5. Optionally (``--ood N``): N of notMNIST's test letters written as 64 px colour photos and
   ``bayescope-cli evaluate --ood`` on the tier's files, for an OOD AUROC the tier itself has no set for.

Every step is seeded and each one's output is kept in ``--work``: a second run reuses the folders,
the decoded pixels and the trained network, and ``zoo`` keeps the files already made. The figures
(accuracy, CPU seconds, the load average beside them) go to ``WORK/demo.json``.

Run: ``OMP_NUM_THREADS=1 python benchmarks/demo_own_network.py [--work DIR] [--epochs 6]
[--methods hmc,map,...] [--set NAME=VALUE] [--ood 1000]``. ``--quick`` checks the whole path in
a minute: a few faces per group, one epoch, the MAP head only. ``--folder`` trains on a folder of
one's own images instead (class folders under ``train/`` and ``test/``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
SIDE = 64
FEATURES = 64
CHANNELS = (16, 32, 64, 128)
#: A quick run: faces per group and split, the epochs, the methods.
QUICK_FACES = (12, 4)
QUICK_METHODS = "map"


def load() -> str:
    """The load average, said beside every figure (the machine is shared)."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


class AgeNet(nn.Module):
    """Four conv blocks, global average pooling, a hidden layer of :data:`FEATURES`, and ``fc``:
    the last linear layer whose outputs the network returns as they are (where bayescope splits it)."""

    def __init__(self, classes: int, channels: tuple[int, ...] = CHANNELS, features: int = FEATURES) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        width = 3
        for c in channels:
            blocks += [nn.Conv2d(width, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
                       nn.MaxPool2d(2)]
            width = c
        self.body = nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, features),
                                  nn.ReLU(inplace=True))
        self.fc = nn.Linear(features, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x))


# ----------------------------------------------------------------------------- the folders


def make_folders(work: Path, utkface: Path | None, quick: bool) -> Path:
    """UTKFace's age-group folders (``bayescope-cli utkface-folders``); with ``quick``, a copy of
    the first few faces of every group and split."""
    from core.commands.main import main as cli

    full = work / "utkface-age-groups"
    # every time: a folder already there keeps its files, and loses any test photo that is a
    # training photo's copy (or another test photo's), which the command leaves out of test/
    argv = ["utkface-folders", "--out", str(full)]
    if utkface:
        argv += ["--utkface", str(utkface)]
    if cli(argv) != 0:
        raise SystemExit("error: the age-group folders could not be made")
    if not quick:
        return full
    small = work / "utkface-quick"
    for split, keep in zip(("train", "test"), QUICK_FACES, strict=True):
        for group in sorted((full / split).iterdir()):
            (small / split / group.name).mkdir(parents=True, exist_ok=True)
            for f in sorted(group.iterdir())[:keep]:
                if not (small / split / group.name / f.name).exists():
                    shutil.copy2(f, small / split / group.name / f.name)
    return small


def decode(folder: Path, work: Path) -> dict[str, Any]:
    """Every image of ``folder`` at :data:`SIDE` px colour as bayescope reads it, (N, 3, S, S)
    uint8 per split, kept in ``work`` under a key of the folder's listing."""
    from core.engine.data.features import folder_listing, listing_stamp
    from core.engine.data.images import decode_stream

    listing = folder_listing(folder)
    if listing.splits is None:
        raise SystemExit(f"error: {folder} has no train/ and test/ folders")
    cache = work / f"pixels-{SIDE}-{listing_stamp(listing)[:16]}.npz"
    if cache.is_file():
        with np.load(cache) as saved:
            return {k: saved[k] for k in saved.files} | {"classes": list(listing.class_names)}
    started = time.process_time()
    pixels = np.zeros((len(listing.paths), 3, SIDE, SIDE), dtype=np.uint8)
    readable = np.zeros(len(listing.paths), dtype=bool)
    for i, array, _, _ in decode_stream(listing.paths, SIDE, 3, workers=0):
        if array is not None:
            pixels[i], readable[i] = array, True
    labels = np.asarray(listing.labels, dtype=np.int64)
    test = np.asarray([s == "test" for s in listing.splits])
    out = {"x_train": pixels[readable & ~test], "y_train": labels[readable & ~test],
           "x_test": pixels[readable & test], "y_test": labels[readable & test]}
    np.savez(cache, **out)
    print(f"decoded {readable.sum():,} images at {SIDE} px in {time.process_time() - started:.0f} s CPU "
          f"(load {load()})", flush=True)
    return out | {"classes": list(listing.class_names)}


# ----------------------------------------------------------------------------- training


def augment(x: torch.Tensor, generator: torch.Generator, pad: int = 4) -> torch.Tensor:
    """A horizontal flip (half the faces) and a crop shifted by up to ``pad`` pixels, per image."""
    n, _, h, w = x.shape
    flip = torch.rand(n, generator=generator) < 0.5
    x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
    padded = nn.functional.pad(x, (pad, pad, pad, pad), mode="replicate")
    dy, dx = (torch.randint(0, 2 * pad + 1, (2, n), generator=generator)).tolist()
    return torch.stack([padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w] for i in range(n)])


def evaluate_network(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """Accuracy and mean negative log-likelihood of the network's own softmax on (x, y)."""
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(x[i:i + 256]) for i in range(0, len(x), 256)])
    return {"accuracy": float((logits.argmax(1) == y).float().mean()),
            "nll": float(nn.functional.cross_entropy(logits, y))}


def train(data: dict[str, Any], epochs: int, seed: int, batch_size: int = 128) -> tuple[nn.Module, dict[str, Any]]:
    """Train :class:`AgeNet` on the training pixels (AdamW, one-cycle learning rate, flips and
    shifted crops); returns the network (eval mode, taking standardised images) and its record."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    x_train = torch.from_numpy(data["x_train"]).float().div_(255)
    mean = x_train.mean(dim=(0, 2, 3))
    std = x_train.std(dim=(0, 2, 3))
    x_train = (x_train - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1)
    y_train = torch.from_numpy(data["y_train"])
    x_test = (torch.from_numpy(data["x_test"]).float().div_(255) - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1)
    y_test = torch.from_numpy(data["y_test"])
    model = AgeNet(len(data["classes"]))
    steps = epochs * -(-len(x_train) // batch_size)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=5e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=3e-3, total_steps=steps)
    started, history = time.process_time(), []
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(x_train), generator=generator)
        total = 0.0
        for i in range(0, len(order), batch_size):
            batch = order[i:i + batch_size]
            loss = nn.functional.cross_entropy(model(augment(x_train[batch], generator)), y_train[batch])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            total += float(loss.detach()) * len(batch)
        scores = evaluate_network(model, x_test, y_test)
        history.append({"epoch": epoch + 1, "train_loss": total / len(x_train), **scores,
                        "cpu_s": time.process_time() - started, "load": load()})
        print(f"epoch {epoch + 1}/{epochs}: training loss {total / len(x_train):.3f}, test accuracy "
              f"{scores['accuracy']:.3f}, NLL {scores['nll']:.3f} ({time.process_time() - started:.0f} s CPU, "
              f"load {load()})", flush=True)
    model.eval()
    record = {"epochs": epochs, "batch_size": batch_size, "seed": seed, "train_images": len(x_train),
              "test_images": len(x_test), "cpu_s": time.process_time() - started, "history": history,
              "weights": sum(p.numel() for p in model.parameters()), "mean": mean.tolist(), "std": std.tolist(),
              **evaluate_network(model, x_test, y_test)}
    return model, record


def save_network(model: nn.Module, record: dict[str, Any], classes: list[str], path: Path) -> None:
    """``torch.jit.save`` the network and write ``path.json`` beside it, as import reads it."""
    with warnings.catch_warnings():  # torch calls TorchScript deprecated; people still save networks so
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(model.eval()), str(path))
    side = {"image_size": SIDE, "mean": record["mean"], "std": record["std"], "classes": classes}
    path.with_suffix(".json").write_text(json.dumps(side, indent=1), encoding="utf-8")


# ----------------------------------------------------------------------------- the tier and OOD


def _zoo(argv: list[str]) -> dict[str, Any]:
    """One ``bayescope-cli zoo`` run in this process; its wall and CPU seconds and the load."""
    from core.commands.main import main as cli

    print("bayescope-cli " + " ".join(argv), flush=True)
    before, wall, cpu = load(), time.perf_counter(), time.process_time()
    code = cli(argv)
    figures = {"argv": argv, "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
               "load_before": before, "load_after": load(), "exit": code}
    if code != 0:
        raise SystemExit(f"error: the tier's build stopped (exit {code})")
    return figures


def build_tier(network: Path, folder: Path, out: Path, methods: str | None, settings: list[str],
               reference: list[str] = ()) -> dict[str, Any]:
    """``bayescope-cli zoo --tier features`` of ``network`` over ``folder``. With ``reference``
    settings, HMC is built alone with them first (zoo's ``--set`` goes to every method that has the
    setting, and ``num_samples`` is also the VI methods' Monte Carlo draws per step), then the other
    methods, and then every file is measured together (``--evaluate-only``), HMC as the reference."""
    from core.commands.zoo_tiers import TIERS

    chosen = methods.split(",") if methods else list(TIERS["features"].methods)
    common = ["zoo", "--tier", "features", "--network", str(network), "--dataset", str(folder), "--out", str(out)]
    sets = [a for s in settings for a in ("--set", s)]
    if not reference or "hmc" not in chosen:
        return {"runs": [_zoo([*common, "--methods", ",".join(chosen), *sets])]}
    runs = [_zoo([*common, "--methods", "hmc", *sets, *(a for s in reference for a in ("--set", s))])]
    others = [m for m in chosen if m != "hmc"]
    if others:
        runs.append(_zoo([*common, "--methods", ",".join(others), *sets]))
        runs.append(_zoo([*common, "--methods", ",".join(chosen), "--evaluate-only"]))
    return {"runs": runs}


def write_letters(notmnist: Path, out: Path, count: int) -> Path:
    """The first ``count`` of notMNIST's test letters as colour PNGs (grey copied to three channels;
    bayescope scales them to the network's side as it scales a photo), in ``out/letters/``."""
    from PIL import Image

    from core.engine.data.idx import read_idx

    images = read_idx(notmnist / "t10k-images-idx3-ubyte.gz")[:count]
    folder = out / "letters"
    folder.mkdir(parents=True, exist_ok=True)
    for i, image in enumerate(images):
        target = folder / f"{i:05d}.png"
        if not target.exists():
            Image.fromarray(np.asarray(image, dtype=np.uint8)).convert("RGB").save(target)
    return out


def ood_auroc(tier: Path, folder: Path, letters: Path, out: Path, limit: int) -> dict[str, Any]:
    """``bayescope-cli evaluate`` of every file of the tier: its test faces against the letters."""
    from core.commands.main import main as cli

    files = sorted(str(p) for p in tier.glob("*.pt"))
    argv = ["evaluate", "--posterior", *files, "--dataset", str(folder), "--ood", str(letters),
            "--limit", str(limit), "--out", str(out)]
    before, wall = load(), time.perf_counter()
    if cli(argv) != 0:
        raise SystemExit("error: the OOD evaluation stopped")
    return {"argv": argv, "wall_s": time.perf_counter() - wall, "load_before": before, "load_after": load()}


# ----------------------------------------------------------------------------- main


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("runs/demo-own-network"),
                        help="where the folders, the network, the tier and demo.json go (reused by a second run)")
    parser.add_argument("--utkface", type=Path,
                        help="UTKFace's archive or folder (default: ../shared/data/utkface, else the user cache)")
    parser.add_argument("--folder", type=Path,
                        help="a folder of one's own images instead of UTKFace's: class folders under train/ and test/")
    parser.add_argument("--epochs", type=int, default=6, help="training epochs (default 6: about 10 min of one core)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--methods", help="the tier's methods, comma-separated (default: all 13)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="zoo's --set: a setting given to every method that has it")
    parser.add_argument("--reference-set", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for HMC alone (e.g. num_samples=400: fewer draws than the tier's 800); "
                             "HMC is then built first on its own, the others after, and all measured together")
    parser.add_argument("--ood", type=int, default=0, metavar="N",
                        help="also measure the OOD AUROC against N notMNIST letters (0: not)")
    parser.add_argument("--no-tier", action="store_true", help="stop after saving the network")
    parser.add_argument("--quick", action="store_true",
                        help=f"a check of the whole path: {QUICK_FACES[0]} training and {QUICK_FACES[1]} test faces "
                             f"per group, one epoch, the tier's {QUICK_METHODS} only")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error(f"--epochs must be at least 1, got {args.epochs}")
    if args.ood < 0:
        parser.error(f"--ood must be 0 or more, got {args.ood}")
    if args.quick:
        args.epochs = 1
        args.methods = args.methods or QUICK_METHODS
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    utkface = args.utkface or (DATA / "utkface" if (DATA / "utkface").is_dir() else None)
    folder = args.folder.resolve() if args.folder else make_folders(work, utkface, args.quick)
    record: dict[str, Any] = {"folder": str(folder), "quick": args.quick, "threads": torch.get_num_threads()}
    network = work / ("net-quick.pt" if args.quick else "net.pt")
    saved = work / (network.stem + "-training.json")
    if network.is_file() and saved.is_file():
        record["training"] = json.loads(saved.read_text(encoding="utf-8"))
        print(f"kept {network} (test accuracy {record['training']['accuracy']:.3f})")
    else:
        data = decode(folder, work)
        model, record["training"] = train(data, args.epochs, args.seed)
        save_network(model, record["training"], data["classes"], network)
        saved.write_text(json.dumps(record["training"], indent=1), encoding="utf-8")
        print(f"saved {network} and {network.with_suffix('.json').name}: {record['training']['weights']:,} weights, "
              f"test accuracy {record['training']['accuracy']:.3f} after {args.epochs} epochs, "
              f"{record['training']['cpu_s']:.0f} s CPU (load {load()})", flush=True)
    if not args.no_tier:
        tier = work / ("tier-quick" if args.quick else "tier")
        record["tier"] = build_tier(network, folder, tier, args.methods, args.set, args.reference_set)
        print((tier / "zoo.md").read_text(encoding="utf-8"))
        for run in record["tier"]["runs"]:
            print(f"{run['wall_s']:.0f} s ({run['cpu_s']:.0f} s CPU in this process; load {run['load_before']} "
                  f"before, {run['load_after']} after): bayescope-cli {' '.join(run['argv'])}")
        if args.ood:
            letters = write_letters(DATA / "notmnist", work / "ood-letters", args.ood)
            record["ood"] = ood_auroc(tier, folder, letters, work / "evaluation", args.ood)
    (work / "demo.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
