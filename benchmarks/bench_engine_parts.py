"""The engine's share of a stroke, column by column, in processor time: each default column's
engine time over its forward-pass floor (issue 49: ≤ 1.5×), and where the rest goes.

For the window's default columns at the preview's 16 draws and the full count's 100, on one
drawing, the thread's processor time (``time.thread_time``) of:

* **floor**: ``bench_gui.py``'s plain batched forward pass of the column's architecture;
* **engine**: one column judged alone as ``bench_gui.py`` times it (``predict_image``: the
  28×28 input made, the forward pass, the finite check, the summary);
* **forward**: the posterior's own ``predict_proba`` (and the engine over it); **summary**:
  the summaries' pass of its draws (:func:`summaries_of`);
* **request**: the four columns in one ``predict_inputs`` as the window asks, against their floors' sum.

Medians of ``--rounds`` rounds of ``--reps`` calls each, the floors' rounds among the others. With ``--against REF`` the engine of a
git revision (its ``core/analysis/summary_arrays.py``, ``uncertainty.py`` and ``predictive.py``) is timed too, round by
round alternating with this checkout's, so that the two see the same load; the summaries of the
two are compared on the way (the largest difference of any number, which should be 0).

MC dropout's ``predict_proba`` is the revision's too (``core/engine/inference/mc_dropout.py``).

With ``--statements`` it times instead every statement of a column's engine one after another as
the window runs them (``predict_inputs``, the summaries' ``_summarise_groups`` and its ``_summarise_stacked``, each
recompiled with a stamp of the wall clock around each statement of its body and of the loops and
``try`` blocks in it): the median of each over ``--reps`` calls, for the HMC column alone and the
four default columns in one request, at 16 and 100 draws, beside the whole call's processor time
without the stamps. Wall clock, because reading a thread's processor time costs ≈ 2 µs a reading
here against ≈ 0.3 µs for the wall clock (wall clock, load 5); medians, so that a call preempted
by another process does not count.

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_engine_parts.py [--rounds 7 --reps 200]
[--against a78f67e] [--statements]``.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import os
import subprocess
import sys
import textwrap
import time
import types
from dataclasses import fields
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: this checkout's packages
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_gui's floor

from bench_gui import floor_ms  # noqa: E402

from core.analysis import predictive as current  # noqa: E402


def source_at(ref: str, path: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def engine_at(ref: str) -> types.ModuleType:
    """``core.analysis.predictive`` as it was at git revision ``ref``, on that revision's own
    ``core.analysis.uncertainty`` and its array helpers ``summary_arrays`` where it has them (the
    rest of the engine is this checkout's)."""
    names = ("summary_arrays", "uncertainty", "predictive")
    present = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", ref, "core/analysis/"],
                             check=True, capture_output=True, text=True).stdout.split()
    modules = {}
    for name in names:
        path = f"core/analysis/{name}.py"
        if path not in present:
            continue
        module = types.ModuleType(f"core.analysis.{name}_at_{ref}")
        sys.modules[module.__name__] = module  # dataclasses look their module up
        kept = {other: sys.modules[f"core.analysis.{other}"] for other in modules}
        sys.modules.update({f"core.analysis.{other}": done for other, done in modules.items()})
        try:  # its imports of the modules loaded before bind to the revision's
            exec(compile(source_at(ref, path), f"{ref}:{path}", "exec"), module.__dict__)  # noqa: S102
        finally:
            sys.modules.update({f"core.analysis.{other}": was for other, was in kept.items()})
        modules[name] = module
    return modules["predictive"]


def dropout_at(ref: str):
    """A function giving, for a posterior, the same posterior predicting with MC dropout's
    ``predict_proba`` as it was at ``ref`` (its class as ``core/engine/inference/mc_dropout.py``
    was then, the weights shared, its masks drawn anew), and any other posterior unchanged."""
    import copy

    from core.engine.inference import base
    from core.engine.inference.mc_dropout import DropoutPosterior

    module = types.ModuleType(f"core.engine.inference.mc_dropout_at_{ref}")
    sys.modules[module.__name__] = module
    kinds = dict(base.POSTERIOR_KINDS)  # the revision's class registers itself: undone below
    try:
        path = "core/engine/inference/mc_dropout.py"
        exec(compile(source_at(ref, path), f"{ref}:{path}", "exec"), module.__dict__)  # noqa: S102
    finally:
        base.POSTERIOR_KINDS.clear()
        base.POSTERIOR_KINDS.update(kinds)

    def at_ref(posterior):
        if type(posterior) is not DropoutPosterior:
            return posterior
        old = copy.copy(posterior)
        old.__class__ = module.DropoutPosterior
        old._masks = {}
        return old
    return at_ref


def summaries_of(engine: types.ModuleType):
    """The summaries' pass as ``engine``'s ``predict_inputs`` calls it: ``summarise_finite`` (with the
    finite checks), or in a revision from before the checks joined it, ``summarise_many``."""
    return getattr(engine, "summarise_finite", None) or engine.summarise_many


def cpu_us(call, reps: int) -> float:
    """Processor time of this thread per call, µs."""
    start = time.thread_time()
    for _ in range(reps):
        call()
    return (time.thread_time() - start) / reps * 1e6


def largest_difference(a, b) -> float:
    """The largest difference between two summaries' numbers (tensors, floats, flags, classes)."""
    worst = 0.0
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, torch.Tensor):
            worst = max(worst, float((x.double() - y.double()).abs().max()))
        elif isinstance(x, float):
            worst = max(worst, abs(x - y))
        elif x != y:
            return float("inf")
    return worst


def with_stamps(module: types.ModuleType, name: str) -> tuple[list[str], list[list[int]]]:
    """Replace ``module.name`` by itself recompiled with the wall clock read around each statement
    of its body, and of the bodies of its loops, ``if`` and ``try`` blocks two levels down: returns
    each statement's first line (indented by its level) and the list its nanoseconds go to. The
    functions it calls are those of ``module`` now: stamp the called ones first."""
    source = textwrap.dedent(inspect.getsource(getattr(module, name)))
    tree = ast.parse(source)
    labels: list[str] = []

    def stamped(body: list[ast.stmt], level: int) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for statement in body:
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                continue  # the docstring
            if level < 2 and isinstance(statement, (ast.For, ast.If, ast.Try)):
                statement.body = stamped(statement.body, level + 1)
            if isinstance(statement, (ast.Return, ast.Continue, ast.Raise)):
                out.append(statement)
                continue
            i = len(labels)
            labels.append("  " * level + ast.get_source_segment(source, statement).splitlines()[0].strip()[:64])
            out += ast.parse(f"_start{i} = _clock()").body
            out.append(statement)
            out += ast.parse(f"_spent[{i}].append(_clock() - _start{i})").body
        return out

    tree.body[0].body = stamped(tree.body[0].body, 0)
    ast.fix_missing_locations(tree)
    spent: list[list[int]] = [[] for _ in labels]
    namespace = dict(module.__dict__, _spent=spent, _clock=time.perf_counter_ns)
    exec(compile(tree, f"{module.__name__}.{name} (stamped)", "exec"), namespace)  # noqa: S102
    setattr(module, name, namespace[name])
    return labels, spent


def statements(posteriors, drawing: np.ndarray, reps: int) -> None:
    """Each statement of a column's engine, in sequence: medians of the wall clock per call."""
    from core.analysis import uncertainty
    from core.engine.naming import samples_used

    x = current.image_batch(drawing)
    plain = {}
    for draws in (16, 100):  # the whole calls' processor time, before the stamps go in
        for columns in (posteriors[:1], posteriors):
            request = [(p, x, samples_used(p, draws)) for p in columns]
            current.predict_inputs(request, seed=None)
            plain[draws, len(columns)] = cpu_us(lambda r=request: current.predict_inputs(r, seed=None), reps)
    # predict_inputs' summarise_finite finds the stamped _summarise_groups in its module when it runs
    stamps = [with_stamps(uncertainty, "_summarise_stacked"), with_stamps(uncertainty, "_summarise_groups")]
    stamps.append(with_stamps(current, "predict_inputs"))
    print(f"\nEach statement in sequence, µs of wall clock, medians of {reps} calls "
          f"(load {os.getloadavg()[0]:.1f}); a loop's or block's line holds its statements below it")
    for draws in (16, 100):
        for columns in (posteriors[:1], posteriors):
            request = [(p, x, samples_used(p, draws)) for p in columns]
            for _, spent in stamps:
                for times in spent:
                    times.clear()
            for _ in range(reps):
                current.predict_inputs(request, seed=None)
            names = ", ".join(p.method for p in columns)
            print(f"\n{draws} draws, {names} in one request: the whole request {plain[draws, len(columns)]:.0f} µs "
                  "of processor time without the stamps")
            for function, (labels, spent) in zip(("_summarise_stacked", "_summarise_groups", "predict_inputs"),
                                                  stamps, strict=True):
                print(f"  {function}")
                for label, times in zip(labels, spent, strict=True):
                    if times:  # a statement that ran (a branch not taken has none)
                        print(f"    {np.median(times) / reps * len(times) / 1e3:8.1f}  {label}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--against", help="a git revision whose engine is timed alternately with this one")
    parser.add_argument("--statements", action="store_true",
                        help="time each statement of a column's engine in sequence instead")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from app.settings import default_columns
    from core.engine.naming import samples_used
    from core.engine.store import load_posterior

    posteriors = [load_posterior(path) for path in default_columns()]
    drawing = np.zeros((28, 28), np.float32)
    drawing[6:22, 13:16] = 1.0  # a stroke: a 1
    drawing[6:9, 10:14] = 0.6
    if args.statements:
        statements(posteriors, drawing, args.reps)
        return
    engines = {"this": current}
    columns_of = {"this": posteriors}
    if args.against:
        engines[args.against] = engine_at(args.against)
        columns_of[args.against] = [dropout_at(args.against)(p) for p in posteriors]
    x = current.image_batch(drawing)
    print(f"{len(posteriors)} columns, {args.rounds} rounds × {args.reps} calls, 1 thread, "
          f"processor time of this thread, load average {os.getloadavg()[0]:.1f} at the start")
    for draws in (16, 100):
        counts = [samples_used(p, draws) for p in posteriors]
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for p, n in zip(posteriors, counts, strict=True):  # the floor in every round too: it drifts with the load
                times.setdefault(("floor", p.method), []).append(
                    floor_ms(p, n, repeats=args.reps, clock=time.thread_time) * 1e3)
            for name, engine in engines.items():
                for p, n in zip(columns_of[name], counts, strict=True):
                    draws_of = p.predict_proba(x, num_samples=n)[:, 0]
                    for part, call in (
                        ("engine", lambda p=p, n=n, e=engine: e.predict_image(p, drawing, n, seed=None)),
                        ("forward", lambda p=p, n=n: p.predict_proba(x, num_samples=n)),
                        ("summary", lambda d=draws_of, e=engine: summaries_of(e)([d])),
                    ):
                        times.setdefault((name, f"{p.method} {part}"), []).append(cpu_us(call, args.reps))
                columns = [(p, x, n) for p, n in zip(columns_of[name], counts, strict=True)]
                times.setdefault((name, "request"), []).append(
                    cpu_us(lambda e=engine, c=columns: e.predict_inputs(c, seed=None), args.reps))
        floors = [float(np.median(times["floor", p.method])) for p in posteriors]
        print(f"\n{draws} draws asked (load {os.getloadavg()[0]:.1f}); µs of processor time, medians")
        parts = ("engine", "÷ floor", "forward", "÷ forward", "summary")
        header = "".join(f"{name[:10] + ' ' + part:>19s}" for name in engines for part in parts)
        print(f"  {'column':12s}{'floor':>9s}{header}")
        for p, floor in zip(posteriors, floors, strict=True):
            row = f"  {p.method:12s}{floor:9.0f}"
            for name in engines:
                engine = float(np.median(times[name, f"{p.method} engine"]))
                forward = float(np.median(times[name, f"{p.method} forward"]))
                row += (f"{engine:19.0f}{engine / floor:19.2f}{forward:19.0f}{engine / forward:19.2f}"
                        f"{np.median(times[name, f'{p.method} summary']):19.0f}")
            print(row)
        for name in engines:
            request = float(np.median(times[name, "request"]))
            print(f"  the {len(posteriors)} columns in one request ({name}): {request:.0f} µs, "
                  f"{request / sum(floors):.2f}× their floors' sum ({sum(floors):.0f} µs)")
        if args.against:
            worst = 0.0
            for seed_input in range(4):
                image = np.clip(drawing + 0.4 * np.random.default_rng(seed_input).random((28, 28), np.float32), 0, 1)
                for p, q, n in zip(posteriors, columns_of[args.against], counts, strict=True):
                    a = current.predict_image(p, image, n, seed=None).summary
                    b = engines[args.against].predict_image(q, image, n, seed=None).summary
                    worst = max(worst, largest_difference(a, b))
            print(f"  largest difference of any summary number, this against {args.against}, "
                  f"4 inputs × {len(posteriors)} columns: {worst:.3g}")
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
