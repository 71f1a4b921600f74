"""The posterior's curvature at its mode, as a fixed metric for HMC and the mini-batch samplers.

For a model small enough that a P × P matrix fits (softmax regression's 7,850 weights: 246 MB
in float32), M = H(θ*) + I/σ² is the posterior precision at the mode θ*: H the generalised
Gauss-Newton matrix of the summed negative log-likelihood (for the softmax's cross-entropy its
exact Hessian), I/σ² the prior's. Where the posterior is nearly Gaussian, M⁻¹ is about its
covariance, so a sampler that moves by M⁻¹ (HMC's velocity M⁻¹r, SGLD's and SGHMC's
preconditioned steps) sees every direction at about unit scale: its step is no longer limited by
the stiffest direction while the loosest random-walk for far longer than a run (the condition
number of the paper tier's M is 5·10⁴; docs/zoo.md). M is computed once, before the first
step, from the full training set and shared by every chain; a fixed metric changes how a
sampler moves, not what it targets (HMC: its Metropolis test; SGLD and SGHMC: a constant
preconditioner needs no correction term, Ma, Chen & Fox 2015, "A Complete Recipe for
Stochastic Gradient MCMC", §3).

The MAP search and the GGN it builds M from (:mod:`~core.engine.inference.map`,
:mod:`~core.engine.inference.laplace`) are imported by the functions that fit: a launch that reads
an HMC or SGHMC posterior and predicts with it imports neither method's module.
"""

from __future__ import annotations

import copy
from collections.abc import Generator
from typing import Any

import torch

from core.engine.device import seeded_generator
from core.engine.inference import sampling
from core.engine.inference.base import Dataset, ProgressRecord
from core.engine.inference.build_cache import once_per_build
from core.engine.inference.chains import Params
from core.engine.inference.optimisation import optimise
from core.engine.inference.param_layout import ParamLayout
from core.engine.inference.sampling import Target
from core.engine.inference.slots import ChainSlots, chain_slots
from core.engine.memory import check_fits
from core.engine.models import ArchSpec, build_model

#: Rows of the metric's matrix per block of :meth:`DenseMetric._rows` (64 × 5,130 float32 weights:
#: 1.3 MB, within a core's cache; 64 and 256 rows measured alike within the noise, 16 slower).
ROW_BLOCK = 64


class DenseMetric:
    """A dense M (P × P, shared by the chains) over θ flattened in ``shapes``' order.

    L and M⁻¹ are factored in float64 and kept in float32 (half the memory and time; M⁻¹'s
    eigenvalues, at least 1/λ_max(M), stay far above float32's rounding). Every product is one
    product over the chains in the run's chain slots (:mod:`~core.engine.inference.slots`, set by
    :meth:`in_slots`; by default the chains given are all of the run's): the P × P matrix is read
    once for all chains, not once per chain, and a chain does the same arithmetic alone as beside
    others, bit for bit, as the chains' split runs need.
    """

    def __init__(self, mass: torch.Tensor, shapes: dict[str, torch.Size]) -> None:
        self.shapes = shapes
        self.layout = ParamLayout(list(shapes.items()))
        #: where M came from, for a posterior's ``info``, and the mode θ* it was measured at (one
        #: chain; set by :func:`mode_and_curvature`)
        self.about: dict[str, Any] = {}
        self.mode: Params = {}
        #: where the chains given to a product sit among the run's chains (None: all of them)
        self.slots: ChainSlots | None = None
        chol = torch.linalg.cholesky(mass.double())  # M = L Lᵀ
        inverse = torch.cholesky_inverse(chol).float()
        if not torch.equal(inverse, inverse.T):  # LAPACK mirrors one triangle; the products read rows
            inverse = (inverse + inverse.T) / 2
        self.inverse = inverse
        self.chol = chol.float()

    def in_slots(self, slots: ChainSlots) -> DenseMetric:
        """This metric (its matrices shared, not copied) for a run whose chains sit in ``slots``."""
        placed = copy.copy(self)
        placed.slots = slots
        return placed

    def flatten(self, tree: Params) -> torch.Tensor:
        return torch.cat([tree[k].flatten(1) for k in self.shapes], dim=1).float()

    def _rows(self, flat: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
        """``flat @ matrixᵀ`` for every chain (row of ``flat``): the chains' slots times
        :data:`ROW_BLOCK` rows of ``matrix`` at a time. A (slots, P) × (P, P) product in one call
        packs the whole matrix first and was no faster than a matrix-vector product per chain
        (51 against 41 ms for 4 chains of 5,130 weights, one thread at load 5); by blocks of
        contiguous rows each block is used for every slot while it is in cache (26 ms; at load 7
        the three took 43–47 ms alike). The blocks are the same for any subset of the chains, so
        a chain's sums are too. The result is a fresh (chains, P) tensor in rows."""
        slots = chain_slots(self.slots, flat.shape[0])
        placed = slots.place(flat)
        return slots.take(torch.cat([placed @ block.T for block in matrix.split(ROW_BLOCK)], dim=1))

    def unflatten(self, flat: torch.Tensor, like: Params) -> Params:
        return {k: v.to(like[k].dtype) for k, v in self.layout.unflatten(flat).items()}

    def momentum(self, z: Params) -> Params:
        return self.unflatten(self._rows(self.flatten(z), self.chol), z)  # Lz, as rows: z Lᵀ

    def velocity(self, momentum: Params) -> Params:
        return self.unflatten(self._rows(self.flatten(momentum), self.inverse), momentum)

    def kinetic(self, momentum: Params) -> torch.Tensor:
        r = self.flatten(momentum)
        return 0.5 * (r * self._rows(r, self.inverse)).sum(1)

    def momentum_and_velocity(self, z: Params) -> tuple[Params, Params]:
        """(r, M⁻¹r) of the momentum r = Lz drawn from z ~ N(0, I): M⁻¹r = L⁻ᵀz, a triangular solve
        that reads half the matrix (M⁻¹'s product reads all of it)."""
        return self.momentum(z), self.spread(z)

    def _solve(self, tree: Params, upper: bool) -> Params:
        """L⁻ᵀ (``upper``) or L⁻¹ times each chain's ``tree``: one triangular solve with the
        chains' slots as its (P, slots) right-hand side."""
        factor = self.chol.T if upper else self.chol
        flat = self.flatten(tree)
        slots = chain_slots(self.slots, flat.shape[0])
        x = torch.linalg.solve_triangular(factor, slots.place(flat).T.contiguous(), upper=upper)
        # back to (chains, P) in rows: a transposed view would carry its strides, which depend on
        # the number of slots, into the weights and so into the kernels of later products
        return self.unflatten(slots.take(x.T.contiguous()), tree)

    def spread(self, z: Params) -> Params:
        """M^(-1/2) z = L⁻ᵀz, a draw of N(0, M⁻¹) from z ~ N(0, I)."""
        return self._solve(z, upper=True)

    def whiten(self, g: Params) -> Params:
        """L⁻¹g, a gradient in the coordinates where M is the identity: ``spread(whiten(g))`` is
        M⁻¹g in two triangular products, which read half the matrix each (a step of SGLD or SGHMC
        then costs two half products instead of a dense product and a half one)."""
        return self._solve(g, upper=False)


class KronMetric:
    """M = G ⊗ A + I/σ² per layer on [W b] (K-FAC of the summed loss at a mode, plus the prior's
    precision), for a network whose P × P matrix will not fit (LeNet-5's 44,426 weights: 7.9 GB).

    From the eigendecompositions G = Q_G Λ_G Q_Gᵀ and A = Q_A Λ_A Q_Aᵀ, M's eigenvectors are
    Q_G ⊗ Q_A with eigenvalues λ_g λ_a + 1/σ², so M^(-1/2) X = Q_G [(Q_Gᵀ X Q_A) ⊙ (λ_g λ_aᵀ +
    1/σ²)^(-1/2)] Q_Aᵀ for a layer's [W b] written as an out × (in + 1) matrix X: two small
    products per side instead of a P × P one. Both :meth:`whiten` and :meth:`spread` apply that
    symmetric root, so ``spread(whiten(g))`` is M⁻¹g and ``spread(z)`` a draw of N(0, M⁻¹), as
    with :class:`DenseMetric`'s Cholesky factor. A weight outside every layer (none in the
    bundled models) gets the prior's σ alone.
    """

    def __init__(self, blocks: list[tuple[str, str | None, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]],
                 prior_std: float) -> None:
        """``blocks``: per layer (weight name, bias name or None, Q_G, λ_G, Q_A, λ_A)."""
        precision = 1.0 / prior_std**2
        self.prior_std = prior_std
        self.blocks = [(w, b, qg.float(), qa.float(),
                        (lg.clamp_min(0)[:, None] * la.clamp_min(0)[None, :] + precision).rsqrt().float())
                       for w, b, qg, lg, qa, la in blocks]
        #: the weights and biases some layer's factors cover (the rest get the prior's σ alone)
        self.covered = {name for w, b, *_ in self.blocks for name in (w, b) if name is not None}
        self.about: dict[str, Any] = {}
        self.mode: Params = {}

    def in_slots(self, slots: ChainSlots) -> KronMetric:
        """This metric, unchanged: its small per-layer products are batched over the chains as
        they come (not laid out in slots)."""
        return self

    def _root(self, tree: Params) -> Params:
        """M^(-1/2) times each chain's ``tree`` (leading chain dim)."""
        out = {k: self.prior_std * v for k, v in tree.items() if k not in self.covered}
        for w, b, qg, qa, scale in self.blocks:
            x = tree[w].reshape(tree[w].shape[0], tree[w].shape[1], -1)
            if b is not None:
                x = torch.cat([x, tree[b].unsqueeze(-1)], dim=-1)
            y = qg @ ((qg.T @ x.float() @ qa) * scale) @ qa.T
            if b is not None:
                out[b] = y[..., -1].to(tree[b].dtype)
                y = y[..., :-1]
            out[w] = y.reshape(tree[w].shape).to(tree[w].dtype)
        return out

    def spread(self, z: Params) -> Params:
        """M^(-1/2) z, a draw of N(0, M⁻¹) from z ~ N(0, I)."""
        return self._root(z)

    def whiten(self, g: Params) -> Params:
        """M^(-1/2) g: ``spread(whiten(g))`` is M⁻¹g."""
        return self._root(g)


def find_mode(target: Target, params: Params, batch: Any, max_iter: int = 500) -> tuple[Params, float]:
    """θ* = argmax log p(θ | D) from the one-chain ``params``, by L-BFGS with a strong-Wolfe
    line search (full batch); returns θ* and log p(θ* | D)."""
    layout = ParamLayout([(k, v.shape[1:]) for k, v in params.items()])
    shapes = layout.shapes
    flat = torch.cat([v.reshape(-1) for v in params.values()]).double().requires_grad_(True)

    def split(x: torch.Tensor) -> Params:
        return {k: v.float() for k, v in layout.unflatten(x.unsqueeze(0)).items()}

    optimiser = torch.optim.LBFGS([flat], lr=1.0, max_iter=max_iter, history_size=20,
                                  tolerance_grad=1e-5, tolerance_change=1e-12, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimiser.zero_grad()
        with torch.no_grad():
            logp, grad = target.log_prob_and_grad(split(flat.detach()), batch)
        flat.grad = -torch.cat([grad[k].reshape(-1) for k in shapes]).double()
        return -logp.double().sum()

    optimiser.step(closure)
    mode = {k: v.detach() for k, v in split(flat.detach()).items()}
    logp, _ = target.log_prob_and_grad(mode, batch)
    return mode, float(logp[0])


def curvature_metric(arch: ArchSpec, mode: Params, data: Dataset, prior_std: float) -> DenseMetric:
    """M = H(θ*) + I/σ²: the exact GGN of the summed negative log-likelihood at the one-chain
    ``mode``, plus the prior's precision; refused in words when P × P will not fit."""
    # imported at a fit, not with this module (its docstring says why)
    from core.engine.inference.laplace import full_ggn

    model = build_model(arch).to(data.x.device).eval()
    names = [n for n, _ in model.named_parameters()]
    size = sum(p.numel() for p in model.parameters())
    # the GGN, its Cholesky factor and M⁻¹, P × P each (built in float64, kept in float32)
    check_fits(8.0 * 3 * size * size, f"the curvature metric of {arch.name}'s {size:,} weights",
               "use metric=diagonal for a network this size", device=data.x.device)
    model.load_state_dict({k: v[0] for k, v in mode.items()})
    h = full_ggn(model, names, data, batch_size=4096)
    h.diagonal().add_(1.0 / prior_std**2)
    return DenseMetric(h, {k: v.shape[1:] for k, v in mode.items()})


def _curvature_inputs(arch: ArchSpec, data: Dataset, prior_std: float, total: int = 0) -> tuple[Any, ...]:
    return arch, data, float(prior_std)


def _copy_curvature(result: tuple[Params, float, DenseMetric]) -> tuple[Params, float, DenseMetric]:
    """θ*, its log posterior and the metric for one more caller: θ* and the metric's records
    copied, its P × P matrices shared (nothing writes into them)."""
    mode, logp, metric = result
    fresh = copy.copy(metric)
    fresh.about, fresh.mode = copy.deepcopy(metric.about), {k: v.clone() for k, v in metric.mode.items()}
    return {k: v.clone() for k, v in mode.items()}, logp, fresh


@once_per_build(_curvature_inputs, _copy_curvature)  # a tier's samplers share one θ* and M (build_cache)
def mode_and_curvature(
    arch: ArchSpec, data: Dataset, prior_std: float, total: int = 0
) -> Generator[ProgressRecord, None, tuple[Params, float, DenseMetric]]:
    """θ* (one chain), log p(θ* | D) and M = H(θ*) + I/σ² on all of ``data``; yields a progress
    record (step 0 of ``total``) before each of the two parts. The search starts from zero
    weights, so every subset of a run's chains (and every machine) finds the same θ* and M. It
    runs to the gradient norm :data:`~core.engine.inference.map.GRAD_TOL` (Newton steps for a model
    linear in its weights, L-BFGS otherwise) and ``metric.about["mode"]`` records how far it got.
    Files made before (L-BFGS for at most 500 iterations, its gradient norm not recorded) stay
    valid: a fixed metric changes how a sampler moves, not what it targets."""
    # imported at a fit, not with this module (its docstring says why)
    from core.engine.inference.map import GRAD_TOL, converge, linear_layer

    model = build_model(arch).to(data.x.device)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    target = sampling.ModelTarget(model, len(data), prior_std, shared_batch=True)
    yield ProgressRecord(0, total, {}, "finding the mode")
    optimiser = "newton" if linear_layer(model) is not None else "lbfgs"
    record = yield from converge(model, data, prior_std, optimiser, GRAD_TOL, 500, "finding the mode")
    mode = {k: v.detach().unsqueeze(0) for k, v in model.named_parameters()}
    mode_logp = float(target.log_prob_and_grad(mode, (data.x, data.y))[0][0])
    yield ProgressRecord(0, total, {}, "curvature at the mode")
    metric = curvature_metric(arch, mode, data, prior_std)
    metric.about = {"kind": "curvature", "mode_log_posterior": mode_logp, "mode": record}
    metric.mode = mode
    return mode, mode_logp, metric


#: What the K-FAC metric needs curvlinops for, in words (the message when it is missing).
KRON_PURPOSE = ("scaling a sampler's steps by the curvature layer by layer (metric=kron)",
                "predicting with the saved posterior")
#: Epochs of MAP training (Adam, cosine-annealed) behind the K-FAC metric: it needs a point near a
#: mode, not the mode (any fixed metric leaves the target unchanged).
KRON_MAP_EPOCHS = 10


def kron_mode_and_metric(
    arch: ArchSpec, data: Dataset, prior_std: float, seed: int, total: int = 0
) -> Generator[ProgressRecord, None, KronMetric]:
    """A MAP θ* of ``arch`` under N(0, σ²) (:data:`KRON_MAP_EPOCHS` epochs from ``seed``, trained as
    the MAP method trains) and the :class:`KronMetric` of K-FAC at θ* on all of ``data``. Chains run
    on other machines from the same seed find the same θ* up to floating point; each chain's metric
    is fixed either way."""
    # imported at a fit, not with this module (its docstring says why)
    from core.engine.inference.laplace import kron_blocks, kron_eigen, summed_nll
    from core.engine.inference.map import MapConfig

    recipe = MapConfig(prior_std=prior_std, epochs=KRON_MAP_EPOCHS)  # the MAP method's: Adam, cosine-annealed
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(arch)
    for record in optimise(model, data, epochs=recipe.epochs, batch_size=recipe.batch_size, lr=recipe.lr,
                           penalty=1.0 / (2.0 * len(data) * prior_std**2), generator=seeded_generator(seed)):
        yield ProgressRecord(record.step, record.total, {}, "finding the mode")
    model = model.to(data.x.device).eval()
    names = [n for n, _ in model.named_parameters()]
    yield ProgressRecord(0, total, {}, "curvature at the mode")
    blocks = [(weight, bias, *eigen) for (_, weight, bias), eigen
              in zip(kron_blocks(model, names), kron_eigen(model, names, data, 1000, KRON_PURPOSE), strict=True)]
    metric = KronMetric(blocks, prior_std)
    metric.mode = {k: v.detach()[None] for k, v in model.named_parameters()}
    log_posterior = -summed_nll(model, data, 1000) + float(sampling.gaussian_log_prior(metric.mode, prior_std)[0])
    metric.about = {"kind": "kron", "map_epochs": KRON_MAP_EPOCHS, "mode_log_posterior": log_posterior}
    return metric


def fixed_metric(config: Any, arch: ArchSpec, data: Dataset,
                 seed: int = 0) -> Generator[ProgressRecord, None, DenseMetric | KronMetric | None]:
    """The fixed metric a mini-batch sampler's ``config.metric`` asks for (None for
    ``"identity"``), with progress while it is computed."""
    kind = getattr(config, "metric", "identity")
    if kind == "identity":
        return None
    steps = config.epochs * -(-len(data) // config.batch_size)
    if kind == "kron":
        return (yield from kron_mode_and_metric(arch, data, config.prior_std, seed, steps))
    _, _, metric = yield from mode_and_curvature(arch, data, config.prior_std, steps)
    return metric
