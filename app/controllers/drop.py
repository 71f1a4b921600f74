"""Files dropped on the window or named on the command line: posteriors become columns, a
picture goes to the Image (or Face) tab. However many files come, a person gets at most one
dialog: how many opened, and one line for each refused file saying why."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtWidgets import QMessageBox, QWidget

from core.engine.naming import plural

POSTERIOR_SUFFIX = ".pt"
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}
#: Refusals listed in the dialog's text; the rest are in its details (a tall box leaves the screen).
LINES_SHOWN = 10
#: The dialog's title for one refused file, by what it was taken for (as each had its own dialog).
SINGLE_TITLES = {"posterior": "Cannot use this posterior", "image": "Cannot use this image", "other": "Cannot open this file"}
#: How the files came, in the dialog's words (“Opened 2 of the 3 files …”).
DROPPED, COMMAND_LINE = "dropped", "named on the command line"


@dataclass
class DropOutcome:
    """What became of a drop: the names opened, (name, kind, why) for each refused file, and how
    the files came (:data:`DROPPED` or :data:`COMMAND_LINE`)."""

    opened: list[str] = field(default_factory=list)
    refused: list[tuple[str, str, str]] = field(default_factory=list)
    given: str = DROPPED


def kind_of(path: Path) -> str:
    """"posterior", "image" or "other", by the file's suffix."""
    suffix = path.suffix.lower()
    return "posterior" if suffix == POSTERIOR_SUFFIX else "image" if suffix in IMAGE_SUFFIXES else "other"


def open_dropped(paths: Iterable[Path], add_posterior: Callable[[Path], str | None],
                 load_image: Callable[[Path], str | None], given: str = DROPPED) -> DropOutcome:
    """Open every file; ``add_posterior`` and ``load_image`` return None when they took the
    file, else why not in a sentence. No dialog is shown here."""
    outcome = DropOutcome(given=given)
    for path in paths:
        kind = kind_of(path)
        if kind == "other":
            why = f"“{path.name}” is neither a posterior (.pt) nor an image (PNG, JPEG, …)."
        else:
            why = add_posterior(path) if kind == "posterior" else load_image(path)
        if why is None:
            outcome.opened.append(path.name)
        else:
            outcome.refused.append((path.name, kind, why))
    return outcome


def refusal_line(name: str, why: str) -> str:
    """One line per refused file, naming it once: a reason that names it keeps its words, one
    that starts with the bare name (“broken.png: not a readable image”) loses that start."""
    for start in (f"“{name}”: ", f"{name}: "):
        if why.startswith(start):
            return f"“{name}”: {why[len(start):]}"
    return why if f"“{name}”" in why else f"“{name}”: {why}"


def summary(outcome: DropOutcome) -> tuple[str, str, str] | None:
    """(title, text, details) of the one dialog a drop gets, or None when every file opened.

    One file refused alone reads as it always did (its title and sentence); several are counted
    and listed, the first :data:`LINES_SHOWN` in the text and every one in the details."""
    if not outcome.refused:
        return None
    total = len(outcome.opened) + len(outcome.refused)
    if total == 1:
        name, kind, why = outcome.refused[0]
        return SINGLE_TITLES[kind], why, ""
    lines = [refusal_line(name, why) for name, _, why in outcome.refused]
    opened = (f"Opened {len(outcome.opened)} of the {total} files {outcome.given}"
              if outcome.opened else f"None of the {total} files {outcome.given} could be opened")
    head = (f"{opened}; {'this one was' if len(lines) == 1 else f'these {len(lines)} were'} refused:"
            if outcome.opened else f"{opened}:")
    shown = lines[:LINES_SHOWN]
    more = len(lines) - len(shown)
    text = "\n".join([head, *(f"• {line}" for line in shown)])
    if more:
        text += f"\n… and {plural(more, 'more file')} (Show Details lists every one)."
    title = "Some files could not be opened" if outcome.opened else "The files could not be opened"
    return title, text, "\n".join(lines) if more else ""


def tell(parent: QWidget, outcome: DropOutcome) -> QMessageBox | None:
    """Show the drop's one dialog (if a file was refused); returns it, for tests."""
    said = summary(outcome)
    if said is None:
        return None
    title, text, details = said
    box = QMessageBox(QMessageBox.Icon.Warning, title, text, QMessageBox.StandardButton.Ok, parent)
    if len(outcome.opened) + len(outcome.refused) > 1:  # a refusal to a line, not wrapped in a narrow box
        box.setStyleSheet("QLabel#qt_msgbox_label { min-width: 40em; }")
    if details:
        box.setDetailedText(details)
    box.exec()
    return box
