"""Deep ensembles (Lakshminarayanan, Pritzel & Blundell 2017, "Simple and Scalable Predictive
Uncertainty Estimation using Deep Ensembles").

M networks θ₁ … θ_M, each from its own random initialisation and its own mini-batch order,
are trained independently to the MAP objective of :mod:`core.engine.inference.map`,

    θ_m = argmin −(1/N) Σᵢ log p(yᵢ | xᵢ, θ) + ‖θ‖² / (2 N σ²),

and the predictive is the uniform mixture p(y | x) = (1/M) Σ_m p(y | x, θ_m). (The paper's
optional adversarial training is not used.) Members are stored as the M chains, one draw
each, of a :class:`SampledPosterior`, so they predict in one vectorised call. Member m's
initial weights, mini-batch order and (for architectures with dropout) training masks come
from its own stream, seeded by :func:`~core.engine.inference.chains.chain_seed` (seed, m),
so the ensemble is reproducible from its seed and a subset of members (``fit(...,
chains=(1, 3))``) is exactly those members of the whole ensemble, ready for
:func:`~core.engine.inference.chain_merge.merge_chains`.

The members train side by side (:func:`train_side_by_side`): their weights are stacked
along a leading member dimension, the loss of every member is evaluated in one
``vmap(functional_call)`` and one Adam optimises the stacked tensors. Adam, its weight
decay and the cosine schedule act element by element, so member m's update is the one it
would get trained alone, and its mini-batch order and dropout masks come from its own
stream in the same order as alone: the result equals training the members one after
another (:func:`train_one_by_one`). That sequential path remains for ensembles whose
stacked training would not fit in the available memory (see :func:`side_by_side_fits`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.func import functional_call, vmap

from core.engine.inference.base import Dataset, FitGenerator, ProgressRecord, SampledPosterior
from core.engine.inference.chains import ChainGenerators, Params, resolve_chains, stack_chains
from core.engine.inference.map import GRAD_TOL, check_mode_settings, converge, resolve_optimiser
from core.engine.inference.optimisation import optimise, squared_norm
from core.engine.memory import USABLE_FRACTION, available_bytes
from core.engine.models import ArchSpec, Dropout


@dataclass(frozen=True)
class EnsembleConfig:
    """Hyperparameters of a deep ensemble.

    Attributes
    ----------
    num_members
        M, the number of independently trained networks.
    prior_std
        σ of the Gaussian prior behind each member's weight decay.
    epochs, batch_size, lr
        Adam with a cosine-annealed learning rate, per member (``optimiser=adam``, or ``auto`` on
        a network).
    optimiser, grad_tol, max_iter
        As :class:`~core.engine.inference.map.MapConfig`, but ``adam`` by default: ``newton``
        (or ``auto``) brings each member of a softmax regression from its own random start to
        the mode. Its log posterior is strictly concave, so every member then reaches the same
        weights: the ensemble of a convex model trained to convergence is the MAP M times over
        (``info["members_spread"]`` says how far apart they end).
    """

    num_members: int = 5
    prior_std: float = 1.0
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    optimiser: str = "adam"
    grad_tol: float = GRAD_TOL
    max_iter: int = 500

    def __post_init__(self) -> None:
        check_mode_settings(self.optimiser, self.grad_tol, self.max_iter)
        if self.num_members < 1 or self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("num_members, epochs, batch_size and lr must be positive")
        if self.prior_std <= 0:
            raise ValueError("prior_std must be positive")


def fit(
    config: EnsembleConfig,
    arch: ArchSpec,
    data: Dataset,
    seed: int,
    chains: Sequence[int] | None = None,
    *,
    side_by_side: bool | None = None,
) -> FitGenerator:
    """Train the members (all, or the subset ``chains`` of member numbers).

    ``side_by_side``: train them at once (:func:`train_side_by_side`) or one after another
    (:func:`train_one_by_one`); None chooses side by side whenever it fits in memory. Both
    give the same members.
    """
    member_ids = resolve_chains(chains, config.num_members)
    streams = ChainGenerators(seed, member_ids, data.x.device)
    models = [model.to(data.x.device) for model in streams.models(arch)]
    chosen = resolve_optimiser(config.optimiser, models[0])
    if chosen != "adam":
        return (yield from converge_members(models, config, arch, data, seed, member_ids, chosen))
    if side_by_side is None:
        side_by_side = side_by_side_fits(arch, len(member_ids), config.batch_size)
    train = train_side_by_side if side_by_side else train_one_by_one
    params = yield from train(
        models, data, streams.generators, epochs=config.epochs, batch_size=config.batch_size,
        lr=config.lr, penalty=1.0 / (2.0 * len(data) * config.prior_std**2),
        describe=lambda i: f"member {member_ids[i] + 1}/{config.num_members}",
    )
    samples = {k: v.detach().unsqueeze(1) for k, v in params.items()}
    info = {"num_members": len(member_ids), "chain_ids": list(member_ids),
            "trained": "side by side" if side_by_side else "one by one"}
    return SampledPosterior("ensemble", arch, asdict(config), seed, data.name, samples, info)


def converge_members(models: list[nn.Module], config: EnsembleConfig, arch: ArchSpec, data: Dataset, seed: int,
                     member_ids: Sequence[int], optimiser: str) -> FitGenerator:
    """Each member from its own random start to the mode (``newton`` or ``lbfgs``), one by one."""
    records = []
    for i, model in enumerate(models):
        record = yield from converge(model, data, config.prior_std, optimiser, config.grad_tol, config.max_iter,
                                     f"member {member_ids[i] + 1}/{config.num_members}")
        records.append(record)
    params = stack_chains(models)
    flat = torch.cat([v.flatten(1).double() for v in params.values()], dim=1)  # (M, P)
    spread = float((flat - flat.mean(0)).norm(dim=1).max())
    samples = {k: v.detach().unsqueeze(1) for k, v in params.items()}
    info = {"num_members": len(member_ids), "chain_ids": list(member_ids), "trained": "one by one",
            "map": records, "members_spread": float(f"{spread:.3g}")}
    return SampledPosterior("ensemble", arch, asdict(config), seed, data.name, samples, info)


def side_by_side_fits(arch: ArchSpec, num_members: int, batch_size: int) -> bool:
    """Whether M members can train at once: weights, gradients and Adam's two moments of
    every member, plus forward and backward activations of M mini-batches (×3, float32),
    within the usable share of the available memory."""
    need = 4.0 * num_members * (4 * arch.parameter_count() + 3 * batch_size * arch.activations_per_image())
    return need <= USABLE_FRACTION * available_bytes()


def train_one_by_one(
    models: list[nn.Module],
    data: Dataset,
    generators: list[torch.Generator],
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    penalty: float,
    describe: Callable[[int], str] = lambda i: f"member {i + 1}",
) -> Generator[ProgressRecord, None, Params]:
    """Train each model in turn with :func:`~core.engine.inference.optimisation.optimise` (Adam,
    cosine schedule), model i from ``generators[i]``; return the stacked weights (M, ...)."""
    for i, (model, generator) in enumerate(zip(models, generators, strict=True)):
        for record in optimise(
            model, data, epochs=epochs, batch_size=batch_size, lr=lr, penalty=penalty, generator=generator,
        ):
            yield ProgressRecord(
                i * record.total + record.step, len(models) * record.total,
                {**record.values, "member": float(i + 1)}, describe(i),
            )
    return stack_chains(models)


def train_side_by_side(
    models: list[nn.Module],
    data: Dataset,
    generators: list[torch.Generator],
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    penalty: float,
    describe: Callable[[int], str] = lambda i: f"member {i + 1}",
    report_every: int = 20,
) -> Generator[ProgressRecord, None, Params]:
    """Train M models of one architecture at once; return their stacked weights (M, ...).

    Each step evaluates mean cross-entropy + ``penalty``·‖θ_m‖² of every member on its own
    mini-batch under ``vmap(functional_call)`` and takes one Adam step (cosine-annealed
    learning rate) on the stacked tensors. Member m draws, from ``generators[m]`` and in
    this order, its epoch's order (``randperm``) and then, batch by batch, one mask per
    dropout layer in forward order, each ``empty(shape).bernoulli_(1 − p)`` as
    :class:`~core.engine.models.Dropout` draws it in training mode: the very numbers
    :func:`train_one_by_one` draws for it. Progress records carry the members' mean loss
    and accuracy.
    """
    template = models[0]
    m = len(models)
    n = len(data)
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in stack_chains(models).items()}
    opt = torch.optim.Adam(list(leaves.values()), lr=lr)
    steps_per_epoch = math.ceil(n / batch_size)
    total = epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(total, 1))
    layers = [layer for layer in template.modules() if isinstance(layer, Dropout) and layer.p > 0]
    masks_now: list[torch.Tensor] = []

    def apply_mask(i: int) -> Callable[..., torch.Tensor]:
        keep = 1.0 - layers[i].p
        return lambda module, inputs, output: inputs[0] * masks_now[i] / keep

    def member_loss(p: Params, x: torch.Tensor, y: torch.Tensor, *masks: torch.Tensor):
        masks_now[:] = masks
        logits = functional_call(template, p, (x,))
        nll = nn.functional.cross_entropy(logits, y)
        loss = nll + penalty * squared_norm(list(p.values()))
        return loss, (nll.detach(), (logits.argmax(-1) == y).sum())

    template.eval()  # dropout through the hooks below, from the members' own streams
    sizes = {min(batch_size, n), n % batch_size or batch_size}  # a full batch and an epoch's last
    shapes = {b: _dropout_input_shapes(template, layers, data.x[:b]) for b in sizes} if layers else {}
    hooks = [layer.register_forward_hook(apply_mask(i)) for i, layer in enumerate(layers)]
    step = 0
    # means over the steps since the last report, which do not restart (and drop) at a pass boundary
    running, seen, correct = torch.zeros(m), 0, torch.zeros(m)
    try:
        for epoch in range(epochs):
            orders = torch.stack([torch.randperm(n, generator=g, device=g.device).cpu() for g in generators])
            pass_seen = 0
            for idx in orders.split(batch_size, dim=1):
                x, y = data.x[idx], data.y[idx]
                b = idx.shape[1]
                masks = _draw_masks(generators, layers, shapes[b], x) if layers else []
                loss, (nll, hits) = vmap(member_loss)(leaves, x, y, *masks)
                opt.zero_grad(set_to_none=True)
                loss.sum().backward()
                opt.step()
                sched.step()
                step += 1
                running += nll.detach() * b
                seen += b
                pass_seen += b
                correct += hits
                if not bool(torch.isfinite(loss).all()):
                    bad = [describe(i) for i in torch.nonzero(~torch.isfinite(loss)).flatten().tolist()]
                    raise FloatingPointError(
                        f"the loss of {', '.join(bad)} became non-finite at step {step}; lower the learning rate"
                    )
                if step % report_every == 0 or step == total:
                    yield ProgressRecord(step, total, {
                        "loss": float((running / seen).mean()),
                        "train_accuracy": float((correct / seen).mean()),
                        "epoch": epoch + pass_seen / n,
                        "lr": sched.get_last_lr()[0],
                    }, f"training {m} members side by side")
                    running, seen, correct = torch.zeros(m), 0, torch.zeros(m)
    finally:
        for hook in hooks:
            hook.remove()
    return {k: v.detach() for k, v in leaves.items()}


def _dropout_input_shapes(model: nn.Module, layers: list[Dropout], x: torch.Tensor) -> list[tuple[int, ...]]:
    """The shape of each dropout layer's input when ``model`` reads the batch ``x``."""
    found: dict[int, tuple[int, ...]] = {}

    def record(i: int) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
            found.setdefault(i, tuple(inputs[0].shape))
        return hook

    hooks = [layer.register_forward_pre_hook(record(i)) for i, layer in enumerate(layers)]
    try:
        with torch.no_grad():
            model(torch.zeros_like(x))
    finally:
        for hook in hooks:
            hook.remove()
    return [found[i] for i in range(len(layers))]


def _draw_masks(
    generators: list[torch.Generator], layers: list[Dropout], shapes: list[tuple[int, ...]], x: torch.Tensor
) -> list[torch.Tensor]:
    """Per dropout layer, the stacked masks (M, *shape) of this step: member by member, layer
    by layer in forward order, as each member's own forward pass would draw them."""
    per_member = [
        [torch.empty(shape, dtype=x.dtype, device=x.device).bernoulli_(1.0 - layer.p, generator=g)
         for shape, layer in zip(shapes, layers, strict=True)]
        for g in generators
    ]
    return [torch.stack([member[i] for member in per_member]) for i in range(len(layers))]
