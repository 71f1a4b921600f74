"""``bayescope-cli join PART... --out FILE``: join the parts of one run into its posterior.

A long run of a sampler (or an ensemble) can be trained in parts, ``train --chains 0,1`` and
``train --chains 2,3`` with otherwise the same arguments, at different times or on different
machines. Chain c draws everything from its own random stream, so the joined chains are those
of the run made in one go (:func:`~core.engine.inference.chain_merge.merge_chains`). ``join``
checks that the parts are of one run and hold every chain once, then does what ``train`` does
after a whole run: it measures the test accuracy and whether the chains agree, keeps
``--keep-draws`` draws of each chain and saves the posterior.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.commands.console import say
from core.commands.train import measure_and_save
from core.engine.data.datasets import DatasetNotFoundError, load_split
from core.engine.data.identity import (
    class_map,
    class_names_of,
    folder_record,
    read_test_split,
    relabelled,
)
from core.engine.files import check_output_file
from core.engine.inference.base import Dataset, Posterior
from core.engine.inference.chain_merge import chains_of_run, merge_chains
from core.engine.inference.chains import chains_in_words
from core.engine.naming import plural
from core.engine.store import load_posterior, save_posterior


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("parts", nargs="+", metavar="PART",
                        help="posterior files holding different chains of one run (train --chains)")
    parser.add_argument("--out", required=True, help="where to write the joined posterior (.pt)")
    parser.add_argument("--data-dir", help="the data folder holding the training data set's test images "
                                           "(your own images: their folder, where it has moved)")
    parser.add_argument("--eval-samples", type=int, default=30,
                        help="draws used to measure the test accuracy (as train's)")
    parser.add_argument("--keep-draws", type=int, metavar="N",
                        help="keep N evenly spaced draws of each chain once convergence is measured (as train's)")
    parser.add_argument("--storage", choices=("float32", "float16"), default="float32",
                        help="how the draws are stored (as train's)")


def _test_images(posterior: Posterior, data_dir: str | None) -> Dataset:
    """The test images beside the training images the parts record (``train``'s own): an IDX data
    set's test split, or a person's images split as the parts record (their folder, or
    ``--data-dir`` where it moved), compared with the record (:func:`read_test_split`)."""
    trained, dataset = posterior.info.get("training_data", {}), posterior.dataset
    if folder_record(trained):
        where = data_dir or trained.get("folder")
        if not where or not Path(where).exists():
            raise DatasetNotFoundError(f"the parts were trained on the images in {where or 'a folder'}, which is "
                                       "no longer there; give its place with --data-dir")
        test = read_test_split(where, {"the parts": trained}, posterior.arch.image_size, posterior.arch.channels)
        note = test.source["data_check"].get("note")
        if note:
            say(f"note: {note}", sys.stderr)
        names = class_names_of(posterior)
        return relabelled(test, class_map(test.class_names, names, test.name, "the parts"), names)
    name, folder = trained.get("dataset"), trained.get("folder")
    if trained.get("split") != "train" or name is None or folder is None:
        raise ValueError(f"the parts were trained on {dataset}, whose test images cannot be found again; "
                         "join measures runs on IDX data sets and on your own images")
    return load_split(name, "test", root=data_dir or Path(folder).parent)


def run(args: argparse.Namespace) -> int:
    if args.eval_samples < 1:
        raise ValueError(f"--eval-samples must be at least 1, got {args.eval_samples}")
    if args.keep_draws is not None and args.keep_draws < 4:
        raise ValueError(f"--keep-draws must keep at least 4 draws of each chain, got {args.keep_draws}")
    check_output_file(args.out, "the joined posterior")
    posterior = merge_chains([load_posterior(p) for p in args.parts])
    count = chains_of_run(posterior.config)
    missing = sorted(set(range(count)) - set(posterior.info["chain_ids"]))
    if missing:
        raise ValueError(f"the parts hold {plural(posterior.num_chains, 'chain')} of the run's {count}: "
                         f"{chains_in_words(missing)} {'has' if len(missing) == 1 else 'have'} not run yet "
                         "(train --chains)")
    test = _test_images(posterior, args.data_dir)
    path = save_posterior(posterior, args.out, storage=args.storage)  # first: a failed measurement loses nothing
    say(f"joined {plural(len(args.parts), 'part')}: {plural(count, 'chain')} of "
        f"{plural(posterior.num_draws, 'draw')} each, saved to {path}")
    return measure_and_save(posterior, path, test, posterior.seed, args.eval_samples, args.keep_draws, args.storage)
