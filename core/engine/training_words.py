"""The training window's words: methods, settings, phases and traces, what a folder of one's own
images holds, and why a run failed or cannot start, for a person who never read a paper.

No Qt here: the dialog's panels (:mod:`app.views.training`) show these sentences, and tests check
them without a window.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from core.engine.data.datasets import (
    DatasetContentError,
    DatasetDownloadError,
    DatasetNotFoundError,
)
from core.engine.data.folder import (
    SHOWN_UNREADABLE,
    FolderData,
    NoReadableImageError,
    OneClassError,
    streamed_refusal,
)
from core.engine.data.idx import IdxFormatError
from core.engine.data.listing import NoImagesError, NotAFolderError
from core.engine.data.locate import DatasetMissingError
from core.engine.files import NotSavedError
from core.engine.inference import METHODS
from core.engine.inference.base import Posterior
from core.engine.inference.chains import chains_in_words
from core.engine.inference.sample_store import SampleBudgetError
from core.engine.inference.sampling import SamplerDivergedError
from core.engine.models import ArchSpec, check_model_fits
from core.engine.naming import ARCH_LABELS, METHOD_DESCRIPTIONS, METHOD_LABELS
from core.engine.settings_help import in_words

#: What the dialog asks a person to do for a missing MNIST.
DOWNLOAD_HINT = "tick “download” under the data folder"
#: The sides a person may choose for their own images (the command line's --image-size takes any).
FOLDER_SIDES = (28, 32, 48, 64, 96, 128, 224)

#: Each network in a sentence, for the model choice's tooltips.
ARCH_TOOLTIPS: dict[str, str] = {
    "softmax": "One linear layer from pixels to classes: the model of the D-SGHMC paper's MNIST "
    "experiment. The fastest to train.",
    "mlp": "A fully connected network with two hidden layers.",
    "lenet": "A small convolutional network (LeNet-5 style: two convolution layers and one "
    "hidden layer). The most accurate and the slowest to train.",
    "lenet5": "LeNet-5 at its own small widths (two convolution layers, two hidden layers; 44,426 "
    "weights): reads digits nearly as well as LeNet, trains several times faster, and its "
    "stored draws are a tenth of the size.",
    "resnet": "A small residual convolutional network (eight layers) for colour images: what a "
    "folder of colour images trains.",
}

#: What the trace and the status line call the numbers a run reports.
VALUE_WORDS: dict[str, str] = {
    "elbo": "ELBO per image",
    "log_posterior": "log posterior",
    "loss": "training loss",
    "train_accuracy": "training accuracy",
    "acceptance": "acceptance rate",
    "step_size": "step size",
    "epoch": "pass",
    "lr": "learning rate",
    "kl": "KL per image",
    "expected_log_likelihood": "expected log-likelihood",
    "grad_norm": "gradient size",
    "param_norm": "weight size",
    "member": "network",
}

#: The trace's axis, where a value is a mean over the steps since the previous point (the
#: training loops report so, rather than a mean over the pass so far, which drops at each new pass).
TRACE_LABELS: dict[str, str] = {
    "loss": "training loss (mean of the steps since the last point)",
    "elbo": "ELBO per image (mean of the steps since the last point)",
}


def trace_label(key: str) -> str:
    """The trace's axis label for the reported value ``key``."""
    return TRACE_LABELS.get(key) or VALUE_WORDS.get(key, key.replace("_", " "))


#: Why the trace shows what it shows, per family of method (``Method.family``).
TRACE_WORDS: dict[str, str] = {
    "sampler": "The trace is the <b>log posterior</b> of the current weights. A sampler does not "
    "minimise a loss: it wanders over the weights, staying longer where the posterior is high, and "
    "keeps what it visits as draws. The log posterior rises while the chain finds the posterior "
    "(burn-in), then levels off and wobbles: that wobble is the spread of belief, not a problem.",
    "loss": "The trace is the <b>training loss</b> (lower is better). This method trains one network "
    "(one per member for ensembles) the usual way; MC dropout gets its spread of belief afterwards, "
    "from switching units off at random at prediction time, so training is plain minimisation.",
    "post_hoc": "The trace is the <b>training loss</b> of the best weights first (lower is better). "
    "The spread of belief comes after them, around them: Laplace measures how flat the loss is "
    "there (a short last phase), SWAG keeps taking snapshots of the weights while plain SGD moves "
    "them about (its loss then wobbles instead of falling).",
    "elbo": "The trace is the <b>ELBO</b> per image (higher is better): a variational method fits a "
    "distribution over the weights by raising it, balancing how well its draws fit the images "
    "against how far it strays from the prior.",
}
PHASE_WORDS: dict[str, str] = {
    "loading data": "Loading the training images",
    "reading images": "Reading the images",
    "eval": "Checking it on the images kept aside",
    "train": "Training",
    "warmup": "Warming up",
    "burn-in": "Burn-in (steps not kept)",
    "sampling": "Sampling",
    "saving": "Saving",
    "convergence": "Checking whether the chains agree",
    "MAP": "Finding the best weights",
    "curvature": "Measuring the loss's curvature around them",
    # a sampler's fixed metric (metric=curvature or kron), before its first step
    "finding the mode": "Finding the most probable weights",
    "curvature at the mode": "Measuring how sharply the data pin them down",
    "main directions of the curvature": "Finding the directions the data pin down most",
    "averaging": "Taking snapshots around them",
}



def trace_words(method: str) -> str:
    """Why the trace of ``method``'s training shows what it shows (its family's words)."""
    entry = METHODS.get(method)
    return TRACE_WORDS.get(entry.family, "") if entry is not None else ""


def method_item_text(name: str) -> str:
    """``"SGHMC — stochastic gradient Hamiltonian Monte Carlo"``: the label and the first
    clause of the description."""
    label = METHOD_LABELS.get(name, name)
    description = METHOD_DESCRIPTIONS.get(name, "")
    short = description.split(":")[0].strip()
    return f"{label} — {short}" if short else label


def method_about(name: str) -> str:
    """What the method choice's line under it says: the description after its colon (the
    combo shows the part before it) and the source."""
    description, summary = METHOD_DESCRIPTIONS.get(name, ""), METHODS[name].summary
    rest = description.partition(":")[2].strip()
    about = f"{rest[:1].upper()}{rest[1:]}. " if rest else ""
    return f"{about}{summary[:1].upper()}{summary[1:]}."


def run_words(method: str, step: int, total: int) -> str:
    """A run in a few words, for the status bar: ``"Training SGLD… 40 %"``."""
    words = f"Training {METHOD_LABELS.get(method, method)}…"
    return f"{words} {100 * step // total} %" if total else words


def number_text(value: float) -> str:
    """``1e-06`` → ``1e-6``; ``0.001`` stays ``0.001``."""
    text = f"{value:.4g}"
    return re.sub(r"e([+-])0*(\d)", lambda m: f"e{'-' if m.group(1) == '-' else ''}{m.group(2)}", text)


def error_in_words(exc: BaseException, method: str, setting_errors: tuple[type[BaseException], ...] = ()) -> str:
    """A message for a failed run that a person can act on (never an exception class name).
    ``setting_errors``: further exception classes worded as settings that cannot be used (the
    window's wrapper of errors raised in a worker)."""
    text = str(exc).strip()
    if isinstance(exc, DatasetMissingError):
        return exc.with_hint(DOWNLOAD_HINT)
    if isinstance(exc, DatasetNotFoundError):
        if isinstance(exc, DatasetDownloadError):
            return (
                "MNIST's training images could not be downloaded: the download site did not answer "
                "or sent a damaged file. Check the internet connection and train again, or choose "
                "a data folder that holds the “mnist” folder."
            )
        return (
            "The MNIST training images were not found in the data folder. Choose the data folder "
            "that holds the “mnist” folder with MNIST's training files, or tick the download box "
            "while online."
        )
    if isinstance(exc, (IdxFormatError, DatasetContentError)):
        return f"The training images could not be read: {text}"
    if isinstance(exc, SampleBudgetError):
        return f"The kept draws would not fit in memory: {in_words(method, text)}"
    if isinstance(exc, SamplerDivergedError) and exc.chains:
        return (
            f"Training went out of bounds: {chains_in_words(exc.chains)} of the sampler ran away at step "
            f"{exc.step:,} (its fit to the training images collapsed), so nothing was saved.\n\n"
            "A smaller step size usually helps."
        )
    if isinstance(exc, FloatingPointError):
        return (
            f"Training went out of bounds: {in_words(method, text)}\n\nA smaller step size or "
            "learning rate usually helps."
        )
    if isinstance(exc, MemoryError) or "out of memory" in text.lower():
        return (
            "The computer ran out of memory. Try fewer chains or networks, fewer images per "
            "step, or a smaller model."
        )
    if isinstance(exc, NotSavedError):
        return f"Training finished but the posterior could not be saved: {text}"
    if isinstance(exc, (ValueError, *setting_errors)):
        return in_words(method, text) or "The settings could not be used."
    if isinstance(exc, OSError):
        return f"A file could not be read or written: {exc.strerror or text}"
    return text or "Training stopped for an unknown reason."



def folder_in_words(data: FolderData) -> tuple[str, str]:
    """What a read folder holds, in words for the dialog, and the unreadable files in detail
    (for its tooltip; empty when every file was read)."""
    names = data.train.class_names
    shown = ", ".join(f"“{n}”" for n in names[:8]) + (f" and {len(names) - 8:,} more" if len(names) > 8 else "")
    images = len(data.train) + len(data.test)
    kind = "colour" if data.channels == 3 else "grey"
    words = (f"Found {images:,} {kind} images in {len(names):,} classes: {shown}. The network sees them "
             f"at {data.image_size}×{data.image_size} pixels; {len(data.train):,} train it and "
             f"{len(data.test):,} are kept aside to check it.")
    if data.copies:  # the split's own note: copies left out of the test images, photos in two classes
        words += f" {data.copies[0].upper()}{data.copies[1:]}."
    if not data.unreadable:
        return words, ""
    count = len(data.unreadable)
    first = Path(data.unreadable[0]["file"])
    first_words = first.name if first.parent == Path(".") else f"{first.name} in “{first.parent.as_posix()}”"
    more = f" and {count - 1:,} more" if count > 1 else ""
    words += (f" {count:,} {'file' if count == 1 else 'files'} could not be read and "
              f"{'is' if count == 1 else 'are'} left out: {first_words}{more} (point here to see why).")
    details = "".join(f"<li>{html.escape(u['file'])}: {html.escape(u['reason'])}</li>"
                      for u in data.unreadable[:SHOWN_UNREADABLE])
    rest = f"<p>and {count - SHOWN_UNREADABLE:,} more</p>" if count > SHOWN_UNREADABLE else ""
    return words, f"<p>Left out, as they could not be read:</p><ul>{details}</ul>{rest}"


def folder_problem(exc: BaseException, folder: str | Path = "") -> str:
    """Why a chosen folder cannot train a posterior, in a sentence without its path."""
    text = str(exc).strip()
    if str(folder).strip():
        for spelling in sorted({str(Path(folder).resolve()), str(folder), str(Path(folder))}, key=len, reverse=True):
            text = text.replace(spelling, "this folder")
    if isinstance(exc, NoReadableImageError):
        first = text.partition("(the first: ")[2].rstrip(")")
        return f"None of the images in this folder could be read (the first: {first})."
    if isinstance(exc, NotAFolderError):
        return "This is not a folder that can be read. Choose a folder that holds one sub-folder of images per class."
    if isinstance(exc, NoImagesError):
        return ("No images were found in this folder (PNG, JPEG, BMP, WebP or TIFF). Put each class's images "
                "in a sub-folder named after the class.")
    if isinstance(exc, OneClassError):
        return ("These images are all of one class, and a classifier needs at least two to tell apart: put "
                "each class's images in a sub-folder named after the class (for example “cats” and “dogs”).")
    if isinstance(exc, DatasetContentError):
        return f"These images cannot train a posterior: {text.split(': ', 1)[-1]}"
    if isinstance(exc, OSError):
        return f"The folder could not be read: {exc.strerror or text}"
    return f"These images cannot train a posterior: {text}"


def folder_refusal(data: FolderData, method: str, arch: ArchSpec, config: Any, start: Posterior | None,
                   device: Any = None) -> str | None:
    """Why the read folder ``data`` cannot train this run (on ``device``), in a sentence: what the
    command line refuses; None when it can."""
    if start is not None and (start.arch.channels, start.arch.image_size, start.arch.num_classes) != (
            data.channels, data.image_size, len(data.train.class_names)):
        return (f"The saved posterior reads {start.arch.num_classes} classes of "
                f"{'colour' if start.arch.channels == 3 else 'grey'} {start.arch.image_size}×"
                f"{start.arch.image_size} images, and these images are {len(data.train.class_names)} classes "
                f"of {'colour' if data.channels == 3 else 'grey'} {data.image_size}×{data.image_size}."
                + (f" Choose {start.arch.image_size}×{start.arch.image_size} pixels under “Image size”."
                   if start.arch.image_size != data.image_size and start.arch.image_size in FOLDER_SIDES
                   and start.arch.channels == data.channels else ""))
    if start is not None:  # classes matched by name, as train --start-from matches them
        from core.engine.data.identity import DataMismatchError, start_classes

        try:
            start_classes(start, "The saved posterior", data.train, data.test, "this folder")
        except DataMismatchError as exc:
            return f"{exc}."
    refusal = streamed_refusal(data, method, device)
    if refusal:
        return f"These images are {refusal}. Choose another method, or compute on the CPU."
    # weights, gradients and Adam's two moments for every chain or member, as the command line checks
    copies = 4 * max(int(getattr(config, "num_chains", 1)), int(getattr(config, "num_members", 1)))
    try:
        check_model_fits(arch, copies, f"training {copies // 4} {ARCH_LABELS.get(arch.name, arch.name)} "
                         f"network(s) of {arch.parameter_count():,} weights", device)
    except (ValueError, MemoryError) as exc:
        return str(exc)
    return None


def small_folder_words(changes: dict[str, int], num_train: int) -> str:
    """The settings a small folder's run was given (:func:`~core.engine.training_plan.small_folder_settings`)
    in one sentence; empty when none changed."""
    parts = []
    if "batch_size" in changes:
        parts.append(f"{changes['batch_size']:,} images per step")
    if "epochs" in changes:
        parts.append(f"{changes['epochs']:,} passes over them")
    if "thin" in changes:
        parts.append(f"a draw kept every {changes['thin']:,} steps")
    if not parts:
        return ""
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return (f"For {num_train:,} training images, {listed}, so that training takes enough steps to learn "
            "(settings you chose yourself are kept).")


def near_chance(share: float, num_classes: int, images: int) -> bool:
    """Whether ``share`` right of ``images`` held-out images is not clearly better than guessing
    among ``num_classes`` classes: within two standard errors of chance, or of 10 % of the way
    from chance to every image right."""
    if num_classes < 2 or images < 1:
        return False
    chance = 1.0 / num_classes
    margin = max(2.0 * (chance * (1.0 - chance) / images) ** 0.5, 0.1 * (1.0 - chance))
    return share < chance + margin


def chance_words(share: float, num_classes: int, images: int) -> str:
    """One sentence when a run's held-out accuracy is near chance, naming what to try; else empty."""
    if not near_chance(share, num_classes, images):
        return ""
    return (f"That is hardly better than guessing, which gets 1 in {num_classes:,} right: the network has "
            "barely learned. Try more passes (epochs), fewer images per step (batch size), a higher "
            "learning rate, or more images of each class.")


def network_problem(exc: BaseException, network: str | Path = "") -> str:
    """Why a chosen network cannot be read or split, in core's own sentence (with how to export it
    so that it can be, where that is the reason), the file named but not its folder, and no
    exception class name."""
    text = str(exc).strip()
    if str(network).strip():
        name = Path(network).name
        for spelling in sorted({str(Path(network).resolve()), str(network), str(Path(network))}, key=len, reverse=True):
            text = text.replace(spelling, name)
    text = re.sub(r" \((?:[A-Za-z_.]*(?:Error|Exception)[A-Za-z_]*)\)", "", text)  # a type's name says nothing
    if not (str(network).strip() and text.startswith(Path(network).name)):  # a file's name is spelt as it is
        text = text[:1].upper() + text[1:]
    return text + ("" if text.endswith(".") else ".")


def tier_stage_words(kind: str, method: str = "", done: int = 0, count: int = 0, kept: bool = False) -> str:
    """A features tier's build stage (:class:`core.commands.zoo_build.TierStage`) in a few words."""
    if kind == "network":
        return "Reading your network"
    if kind == "features":
        return "Passing every image through your network once"
    if kind == "measuring":
        return "Measuring every posterior on your test images"
    label = METHOD_LABELS.get(method, method)
    if kind == "failed":
        return f"{label} could not be trained"
    return f"{label} ({done + 1} of {count}): " + ("kept, made before with the same settings" if kept else "training")
