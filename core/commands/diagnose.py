"""``bayescope-cli diagnose FILE...``: measure whether a sampled posterior's chains agree, and
write it into the file.

For each file: every stored draw predicts the first 1000 test images of the data set it was
trained on (``--data`` for another), the chains are compared there (rank-normalised split-R̂,
bulk and tail ESS; :mod:`core.analysis.diagnostics`), and the result is added to the file's
``info["diagnostics"]`` in place, atomically, its weights unchanged and its checksum renewed.
A posterior whose R̂ cannot be measured (one chain, fewer than 4 draws per chain, no chains
at all) gets the reason instead. No refitting. A file that keeps fewer draws than its run
measured (``train --keep-draws``) keeps the run's figures, which its draws can no longer give,
and gets the figures of the draws it stores beside them (``info["diagnostics"]["stored"]``).
"""

from __future__ import annotations

import argparse

from core.analysis.diagnostics import diagnose_progress, not_applicable, probe_spec, stored_figures
from core.analysis.evaluation import resolve_dataset
from core.commands.console import bar_callback, progress_bar, say
from core.commands.info import convergence_text
from core.engine.runner import drain
from core.engine.store import add_to_info, load_posterior


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="posterior files (.pt), updated in place")
    parser.add_argument("--data", metavar="NAME|FOLDER",
                        help="the data set whose first 1000 test images probe the chains "
                        "(default: the test split of the set the posterior was trained on)")
    parser.add_argument("--data-dir", help="folder holding the data sets (as for 'evaluate')")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of any input masks drawn at prediction and of the shuffles behind the floor "
                        "(default: the posterior's own, as training measured it)")


def run(args: argparse.Namespace) -> int:
    for name in args.files:
        posterior = load_posterior(name)
        old = posterior.info.get("diagnostics")
        kept = isinstance(old, dict) and bool(old.get("kept_draws"))
        probe = None
        if not_applicable(posterior) is None:  # only then are images needed
            spec = args.data or probe_spec(posterior)
            if spec is None:
                raise ValueError(f"{name}: trained on {posterior.dataset!r}, whose test images are not "
                                 "known here; name them with --data")
            probe = resolve_dataset(spec, args.data_dir)
        seed = int(posterior.seed) if args.seed is None else args.seed  # training measured with the run's seed
        bar = progress_bar(0, f"convergence of {name}")
        try:
            record = drain(diagnose_progress(posterior, probe, seed), bar_callback(bar))
        finally:
            bar.close()
        if kept and record.get("status") == "measured":
            # the run's figures stay (its draws are gone); the stored draws' are kept beside them
            stored = stored_figures(record, seed)
            add_to_info(name, {"diagnostics": {**old, "stored": stored}})
            say(f"{name}: on all {old.get('chains')} × {old.get('draws')} draws of the run: {convergence_text(old)}")
            say(f"{name}: on the {stored['chains']} × {stored['draws']} draws it stores: "
                f"{convergence_text({**record, 'status': 'measured'})}")
            continue
        add_to_info(name, {"diagnostics": record})
        say(f"{name}: {convergence_text(record)}")
    return 0
