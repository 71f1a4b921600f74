"""A tier's files made: each method's ``bayescope-cli train`` command line, a file kept when the same
arguments made it, the methods trained one at a time or side by side (:mod:`core.commands.zoo_jobs`),
a sampler's chains run in parts and joined, and the stages the build reports to an observer."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.commands.console import USER_ERRORS, bar_callback, describe_error, progress_bar, say
from core.commands.zoo_jobs import (
    Job,
    JobCallbacks,
    default_workers,
    run_side_by_side,
    train_command,
    worker_threads,
)
from core.commands.zoo_tiers import Tier
from core.engine.inference import METHODS
from core.engine.inference.base import ProgressRecord
from core.engine.inference.chains import chains_in_words
from core.engine.inference.recipes import FEATURES_SECONDS, FEATURES_TIER
from core.engine.runner import report


@dataclass(frozen=True)
class TierStage:
    """Where a tier's build is, handed to an observer (:func:`core.engine.runner.report`; the
    window's training dialog) as the run reaches it; the command line prints its own lines.

    ``kind``: ``"network"`` (the network read and split), ``"features"`` (every image through it
    once, or read from the cache), ``"method"`` (``method`` trained, or ``kept`` when its file was
    made with the same arguments; ``done`` of ``count`` methods before it), ``"failed"`` (``method``
    could not be trained, ``words`` says why) and ``"measuring"`` (every file measured on the test
    images)."""

    kind: str
    method: str = ""
    done: int = 0
    count: int = 0
    kept: bool = False
    words: str = ""


#: In a tier's arguments, the tier's own MAP file in the same folder (``--start-from {map}``: Laplace
#: and SWAG start from the mode the MAP method found, instead of finding it again).
MAP_FILE = "{map}"


def train_arguments(tier: Tier, method: str, out: Path, args: argparse.Namespace) -> list[str]:
    """The ``bayescope-cli train`` command line that makes ``method``'s file of ``tier``."""
    given = [str(tier.path(out.parent, "map")) if a == MAP_FILE else a for a in tier.methods[method]]
    argv = ["train", *tier.model, *given, *setting_overrides(method, args), "--seed", str(args.seed), "--out", str(out)]
    data_dir = tier.data.locate(args.data_dir)
    if data_dir:
        argv += ["--data-dir", data_dir]
    if args.limit:
        argv += ["--limit", str(args.limit)]
    if getattr(args, "cluster", None):
        argv += ["--cluster", args.cluster]
    return argv


def setting_overrides(method: str, args: argparse.Namespace) -> list[str]:
    """``zoo --set`` for ``method``: those of its settings it has (the others' are left out)."""
    from core.commands.console import parse_settings

    known = METHODS[method].defaults()
    chosen = parse_settings(getattr(args, "set", None) or [])
    return [part for name, value in chosen.items() if name.replace("-", "_") in known
            for part in ("--set", f"{name}={value}")]


def recorded_arguments(argv: list[str]) -> list[str]:
    """``argv`` without the output path, the data folder and the cluster: what makes a file what it
    is (the chains of a run on a cluster are those of the same run here); a ``--start-from`` file
    by its name alone (the folder is where the tier is)."""
    kept = _without(argv, ("--out", "--data-dir", "--cluster"))
    return [Path(a).name if i and kept[i - 1] == "--start-from" else a for i, a in enumerate(kept)]


def _without(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """``argv`` without each of ``options`` and its value."""
    kept, skip = [], False
    for a in argv:
        if not skip and a not in options:
            kept.append(a)
        skip = a in options and not skip
    return kept


def already_made(path: Path, argv: list[str], listing: str | None = None) -> bool:
    """Whether ``path`` holds a posterior made by ``argv`` already (then it is not retrained); with
    ``listing`` (a features tier's folder, :func:`core.engine.data.features.listing_stamp`), made from
    the folder as it is now."""
    from core.engine.store import file_records

    if not path.is_file():
        return False
    try:
        zoo = file_records(path)["info"].get("zoo", {})
        return zoo.get("arguments") == recorded_arguments(argv) and zoo.get("listing") == listing
    except (*USER_ERRORS, OSError):  # a damaged or older file is rebuilt
        return False


def _train(argv: list[str]) -> int:
    """``bayescope-cli train`` with ``argv`` (its name first), in this process."""
    return train_command(argv)


def build(tier: Tier, methods: list[str], folder: Path, args: argparse.Namespace) -> int:
    """Train every method of ``tier`` not yet in ``folder``; return the exit code of the first failure.
    The methods share what they would each compute alike: the samplers' mode and curvature
    (:mod:`~core.engine.inference.build_cache`). With ``--jobs`` above 1 (the features tier's default
    on a machine of two cores or more) they train side by side (:mod:`core.commands.zoo_jobs`)."""
    from core.engine.inference.build_cache import shared_within_build

    workers = jobs_for(tier, methods, args)
    if workers > 1:
        return _build_side_by_side(tier, methods, folder, args, workers)
    with shared_within_build():
        return _build_methods(tier, methods, folder, args)


def jobs_for(tier: Tier, methods: list[str], args: argparse.Namespace) -> int:
    """How many methods ``args`` trains at a time: ``--jobs``, or by default
    :func:`~core.commands.zoo_jobs.default_workers` for the features tier built from the command
    line, one for the other tiers (their bundled files were made one at a time) and in the window
    (whose estimate and progress follow one method at a time)."""
    from core.engine.runner import observing

    given = getattr(args, "jobs", None)
    if given is not None:
        if given < 1:
            raise ValueError(f"--jobs must be at least 1, got {given}")
        if given > 1 and (getattr(args, "chains", None) or getattr(args, "cluster", None)):
            raise ValueError("--jobs trains methods side by side on this machine; leave out --cluster and --chains")
        return min(given, max(1, len(methods)))
    if not tier.own or observing() or getattr(args, "chains", None):
        return 1
    return default_workers(len(methods))


def _record_zoo(tier: Tier, path: Path, argv: list[str], listing: str | None) -> None:
    """Write into ``path``'s file, just made by ``train argv``, the tier it belongs to and the
    arguments that made it (what a rebuild compares to keep it)."""
    from core.engine.store import load_posterior, save_posterior

    posterior = load_posterior(path)
    posterior.info["zoo"] = {"tier": tier.name, "arguments": recorded_arguments(argv),
                             **({"listing": listing} if listing else {})}
    save_posterior(posterior, path, storage="float16" if "float16" in argv else "float32")


def _build_methods(tier: Tier, methods: list[str], folder: Path, args: argparse.Namespace) -> int:
    for i, method in enumerate(methods, 1):
        path = tier.path(folder, method)
        argv = train_arguments(tier, method, path, args)
        listing = getattr(args, "listing", None)
        kept = already_made(path, argv, listing)
        report(TierStage("method", method, i - 1, len(methods), kept=kept))
        if kept:
            say(f"[{i}/{len(methods)}] {method}: kept {path.name} (made with the same arguments)")
            continue
        if args.chains:
            code = _build_part(tier, method, path, argv, args, f"[{i}/{len(methods)}] {method}")
            if code != 0:
                return code
            continue
        say(f"[{i}/{len(methods)}] {method}: bayescope-cli {' '.join(argv)}")
        try:
            code = _train(argv)
        except KeyboardInterrupt:
            say(f"cancelled during {method}: the files made so far are kept in {folder}, and running the same "
                "command again goes on from there", sys.stderr)
            raise
        except (*USER_ERRORS, MemoryError) as exc:
            code = 2
            say(f"error: {describe_error(exc)}", sys.stderr)
            report(TierStage("failed", method, i - 1, len(methods), words=describe_error(exc)))
        if code != 0:
            say(f"error: {method} of the {tier.name} tier failed (exit {code}); the files made so far are kept, "
                "and running the same command again goes on from here", sys.stderr)
            return code
        _record_zoo(tier, path, argv, listing)
    return 0


#: The shared results' folder of a build whose methods train side by side (removed at its end).
SHARED_FOLDER = ".build-shared"


def _build_side_by_side(tier: Tier, methods: list[str], folder: Path, args: argparse.Namespace, workers: int) -> int:
    """:func:`build` with ``workers`` methods at a time, each in a process of its own
    (:func:`~core.commands.zoo_jobs.run_side_by_side`), the longest first; the lines and the
    stages as the one-at-a-time build gives them, numbered in the order the methods start."""
    from tqdm import tqdm

    from core.commands.console import printable

    listing = getattr(args, "listing", None)
    count = len(methods)
    numbers: dict[str, int] = {}
    jobs: list[Job] = []
    for method in methods:
        path = tier.path(folder, method)
        argv = train_arguments(tier, method, path, args)
        if already_made(path, argv, listing):
            numbers[method] = len(numbers) + 1
            report(TierStage("method", method, numbers[method] - 1, count, kept=True))
            say(f"[{numbers[method]}/{count}] {method}: kept {path.name} (made with the same arguments)")
            continue
        jobs.append(Job(method, tuple(argv), cost=schedule_seconds(tier, method)))
    pending = {j.method for j in jobs}
    # Laplace and SWAG start from the tier's MAP file: while the MAP is still to train, they wait for it
    jobs = [replace(j, after=("map",)) if MAP_FILE in tier.methods[j.method] and "map" in pending - {j.method}
            else j for j in jobs]
    if not jobs:
        return 0
    workers = min(workers, len(jobs))
    threads = worker_threads(workers)
    say(f"training {len(jobs)} of the {count} methods {workers} at a time, each in a process of its own "
        f"({threads} thread{'s' if threads > 1 else ''} each), the longest first")
    bars: dict[str, Any] = {}
    began: dict[str, float] = {}
    finished: list[str] = []

    def line(text: str, error: bool = False) -> None:
        tqdm.write(printable(text), file=sys.stderr if error else sys.stdout)

    def started(job: Job) -> None:
        numbers[job.method] = len(numbers) + 1
        began[job.method] = time.monotonic()
        report(TierStage("method", job.method, count - len(pending) + len(finished), count))
        line(f"[{numbers[job.method]}/{count}] {job.method}: bayescope-cli {' '.join(job.argv)}")
        bars[job.method] = progress_bar(0, job.method)

    def record(job: Job, item: ProgressRecord) -> None:
        report(item)
        bar = bars.get(job.method)
        if bar is not None:
            bar.set_description(f"{job.method}{': ' + item.phase if item.phase else ''}", refresh=False)
            bar_callback(bar)(item)

    def said(job: Job, text: str, error: bool) -> None:
        line(f"  {job.method}: {text}", error)

    def ended(job: Job, code: int, words: str, cpu: float) -> None:
        bar = bars.pop(job.method, None)
        if bar is not None:
            bar.close()
        if code == 0:
            _record_zoo(tier, tier.path(folder, job.method), list(job.argv), listing)
            finished.append(job.method)
            line(f"[{numbers[job.method]}/{count}] {job.method}: done in "
                 f"{(time.monotonic() - began[job.method]) / 60:.1f} min ({cpu / 60:.1f} min of CPU)")
            return
        if words:
            line(f"error: {words}", True)
        report(TierStage("failed", job.method, count - len(pending) + len(finished), count, words=words))
        line(f"error: {job.method} of the {tier.name} tier failed (exit {code}); the files made so far are kept, "
             "and running the same command again goes on from here" + (
                 f" (the methods still training, {', '.join(bars)}, finish first)" if bars else ""), True)

    try:
        return run_side_by_side(jobs, workers, threads, folder / SHARED_FOLDER,
                                JobCallbacks(started, record, said, ended))
    except KeyboardInterrupt:
        running = ", ".join(bars)
        say(f"cancelled{' during ' + running if running else ''}: the files made so far are kept in {folder}, "
            "and running the same command again goes on from there", sys.stderr)
        raise
    finally:
        for bar in bars.values():
            bar.close()


def schedule_seconds(tier: Tier, method: str) -> float:
    """What ``method`` is expected to take in ``tier``, for the order of a side-by-side build: the
    features tier's measured seconds (:data:`~core.engine.inference.recipes.FEATURES_SECONDS`), 0
    for a method or tier not measured (those keep the tier's order, after the measured ones)."""
    return float(FEATURES_SECONDS.get(method, 0.0)) if tier.name == FEATURES_TIER else 0.0


def _part_arguments(argv: list[str], chains: str, out: Path) -> list[str]:
    """``train``'s arguments for the chains ``chains`` of the run ``argv``: kept in float32 with
    every draw (the draws are thinned and stored as the run says when the parts are joined)."""
    return [*_without(argv, ("--keep-draws", "--storage", "--out")), "--chains", chains, "--out", str(out)]


def chain_count(argv: list[str] | tuple[str, ...]) -> int:
    """The number of chains ``train``'s arguments ``argv`` run (0: a method without chains)."""
    return int(dict(a.split("=", 1) for a in argv if a.startswith("num_chains=")).get("num_chains", 0))


def option_value(argv: list[str], name: str) -> str | None:
    """The value given to option ``name`` in ``argv`` (None: not given)."""
    return argv[argv.index(name) + 1] if name in argv else None


def _build_part(tier: Tier, method: str, path: Path, argv: list[str], args: argparse.Namespace, head: str) -> int:
    """Run the chains ``args.chains`` of ``method``'s run into ``DIR/parts``; join the parts into
    ``path`` once they hold every chain. Returns an exit code."""
    from core.commands import join
    from core.engine.store import file_records, load_posterior, save_posterior

    parts = path.parent / "parts"
    parts.mkdir(exist_ok=True)
    out = parts / f"{path.stem}.chains-{args.chains.replace(',', '-')}.pt"
    part_argv = _part_arguments(argv, args.chains, out)
    if already_made(out, part_argv):
        say(f"{head}: kept {out.name} (made with the same arguments)")
    else:
        say(f"{head}: bayescope-cli {' '.join(part_argv)}")
        code = _train(part_argv)
        if code != 0:
            say(f"error: chains {args.chains} of {method} failed (exit {code})", sys.stderr)
            return code
        posterior = load_posterior(out)
        posterior.info["zoo"] = {"tier": tier.name, "arguments": recorded_arguments(part_argv)}
        save_posterior(posterior, out)
    whole = recorded_arguments(_without(argv, ("--keep-draws", "--storage")))  # a part's, but for --chains
    done: dict[int, Path] = {}
    for candidate in sorted(parts.glob(f"{path.stem}.chains-*.pt")):
        try:
            records = file_records(candidate)
        except (*USER_ERRORS, OSError):
            continue
        made = records["info"].get("zoo", {}).get("arguments", [])
        if "--chains" in made and _without(made, ("--chains",)) == whole:
            done.update({int(c): candidate for c in records["info"].get("chain_ids", [])})
    count = chain_count(argv)
    missing = [c for c in range(count) if c not in done]
    if missing:
        say(f"{head}: {chains_in_words(sorted(done))} of {count} {'has' if len(done) == 1 else 'have'} run; "
            f"the rest: bayescope-cli zoo --tier {tier.name} --methods {method} --chains {','.join(map(str, missing))} --out {path.parent}")
        return 0
    keep, storage = option_value(argv, "--keep-draws"), option_value(argv, "--storage") or "float32"
    join_argv = [*sorted(set(map(str, done.values()))), "--out", str(path), "--storage", storage,
                 *(["--keep-draws", keep] if keep else []), *(["--data-dir", args.data_dir] if args.data_dir else [])]
    say(f"{head}: every chain has run; bayescope-cli join {' '.join(join_argv)}")
    parser = argparse.ArgumentParser(prog="bayescope-cli join")
    join.add_arguments(parser)
    code = join.run(parser.parse_args(join_argv))
    if code != 0:
        return code
    posterior = load_posterior(path)
    posterior.info["zoo"] = {"tier": tier.name, "arguments": recorded_arguments(argv),
                             "joined_from": sorted(p.name for p in set(done.values()))}
    save_posterior(posterior, path, storage=storage)
    return 0
