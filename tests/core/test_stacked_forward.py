"""The interactive path's shortcuts give the same numbers as the plain computation: the
written-out forward pass over S weight sets equals vmap(functional_call) for every
architecture, input kind, chunking and number of weight sets, and MC dropout's kept bank of
masks equals the masks a fresh bank generator draws."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, vmap

from core.engine.inference.base import interactive_generator
from core.engine.inference.mc_dropout import DropoutPosterior
from core.engine.models import ArchSpec, build_model
from core.engine.models.dropout import mc_dropout, split_before_dropout
from core.engine.models.stacked import stacked_forward

SPECS = [
    ArchSpec("softmax"),
    ArchSpec("mlp", hidden=32),
    ArchSpec("lenet"),
    ArchSpec("lenet", image_size=20, num_classes=8),  # another image size and class count
    ArchSpec("softmax", input_dim=128, num_classes=8),  # feature vectors (face descriptors)
    ArchSpec("mlp", input_dim=128, num_classes=8, hidden=16),
]


def weight_sets(model: torch.nn.Module, s: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: v.detach() + 0.05 * torch.randn(s, *v.shape, generator=g) for k, v in model.named_parameters()}


def reference(model, params, x):
    with torch.no_grad():
        return vmap(lambda p: functional_call(model, p, (x,)))(params)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.name}-{s.image_size}-{s.input_dim}")
@pytest.mark.parametrize("s", [1, 3, 16])
@pytest.mark.parametrize("n", [1, 5])
def test_equals_vmap_of_functional_call(spec, s, n):
    model = build_model(spec)
    params = weight_sets(model, s, seed=s * 10 + n)
    x = torch.rand(n, *spec.input_shape, generator=torch.Generator().manual_seed(n))
    want = reference(model, params, x)
    with torch.no_grad():
        got = stacked_forward(model, params, x)
        chunked = stacked_forward(model, params, x, chunk_size=2)
    assert got.shape == want.shape == (s, n, spec.num_classes)
    # float32 sums in another order: logits agree to a few units in 10⁵ of their size
    scale = float(want.abs().max())
    torch.testing.assert_close(got, want, rtol=0, atol=3e-5 * scale)
    torch.testing.assert_close(chunked, want, rtol=0, atol=3e-5 * scale)
    # the class probabilities agree to float rounding
    assert (got.softmax(-1) - want.softmax(-1)).abs().max() < 1e-5


def test_any_other_module_goes_through_vmap():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3)).eval()
    params = weight_sets(model, 4, seed=0)
    x = torch.rand(2, 1, 4, 4)
    with torch.no_grad():
        torch.testing.assert_close(stacked_forward(model, params, x), reference(model, params, x))


def test_gradients_flow_to_every_weight_set():
    model = build_model(ArchSpec("lenet"))
    params = {k: v.requires_grad_() for k, v in weight_sets(model, 3, seed=1).items()}
    stacked_forward(model, params, torch.rand(2, 1, 28, 28)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in params.values())


@pytest.mark.parametrize("spec", [ArchSpec("lenet", drop_rate=0.5), ArchSpec("mlp", hidden=32, drop_rate=0.3),
                                  ArchSpec("softmax", drop_rate=0.2)], ids=lambda s: s.name)
def test_mc_dropout_kept_masks_are_the_bank_s_masks_bit_for_bit(spec):
    model = build_model(spec)
    posterior = DropoutPosterior("mc_dropout", spec, {}, 7, "test", dict(model.named_parameters()))
    x = torch.rand(1, *spec.input_shape, generator=torch.Generator().manual_seed(1))
    shared, rest = split_before_dropout(posterior.model)
    for s in (16, 100, 16):  # the kept masks for 16 draws survive a call with 100
        with torch.no_grad(), mc_dropout(posterior.model, generator=interactive_generator(7)):
            h = shared(x)
            want = torch.softmax(rest(h.expand(s, *h.shape[1:])).reshape(s, 1, -1).float(), -1)
        assert torch.equal(posterior.predict_proba(x, s), want)
    # every architecture keeps its bank's masks (softmax regression drew 100 × 784 afresh on
    # every stroke: 3.6 ms, most of its column's time), and splits where its model computes
    assert {rows for rows, *_ in posterior._masks} == {16, 100}
    with torch.no_grad():
        assert torch.equal(rest(shared(x)), posterior.model(x))
    # an explicit generator still draws fresh masks on every call
    g = torch.Generator().manual_seed(3)
    assert not torch.equal(posterior.predict_proba(x, 16, generator=g), posterior.predict_proba(x, 16, generator=g))


@pytest.mark.parametrize("spec", [ArchSpec("softmax", drop_rate=0.5), ArchSpec("mlp", hidden=32, drop_rate=0.25),
                                  ArchSpec("softmax", drop_rate=0.3)], ids=["half", "quarter", "other"])
@pytest.mark.parametrize("n", [1, 3])
def test_mc_dropout_kept_masks_on_one_input_or_several_are_dropout_s_own(spec, n):
    """The kept masks met by broadcasting (one input) or by the input's copies (several), kept
    divided by the keep rate where it is a power of two (p = 0.5, 0.25): the same probabilities
    bit for bit as torch's dropout with the bank's generator."""
    model = build_model(spec)
    posterior = DropoutPosterior("mc_dropout", spec, {}, 3, "test", dict(model.named_parameters()))
    x = torch.rand(n, *spec.input_shape, generator=torch.Generator().manual_seed(n))
    shared, rest = split_before_dropout(posterior.model)
    for s in (16, 5):
        with torch.no_grad(), mc_dropout(posterior.model, generator=interactive_generator(3)):
            h = shared(x)
            h = h.unsqueeze(0).expand(s, *h.shape).reshape(s * n, *h.shape[1:])
            want = torch.softmax(rest(h).reshape(s, n, -1).float(), -1)
        assert torch.equal(posterior.predict_proba(x, s), want)
        assert torch.equal(posterior.predict_proba(x, s), want)  # from the kept masks


@pytest.mark.parametrize("spec", SPECS[:3], ids=lambda s: s.name)
def test_a_shared_batch_target_is_the_per_chain_target_on_the_same_batch(spec):
    # full-batch HMC passes one (x, y) to every chain; its log posterior and gradient are
    # those of the per-chain target given that batch copied to every chain
    from core.engine.inference.sampling import ModelTarget

    model = build_model(spec)
    params = weight_sets(model, 3, seed=7)
    g = torch.Generator().manual_seed(1)
    x, y = torch.rand(40, *spec.input_shape, generator=g), torch.randint(0, spec.num_classes, (40,), generator=g)
    per_chain = ModelTarget(model, 600, prior_std=0.7)
    shared = ModelTarget(model, 600, prior_std=0.7, shared_batch=True)
    want, want_grad = per_chain.log_prob_and_grad(params, (x.expand(3, *x.shape), y.expand(3, 40)))
    got, got_grad = shared.log_prob_and_grad(params, (x, y))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-3)
    if spec.name == "lenet":
        # max-pooling ReLU outputs ties at 0, and which tied input a kernel hands the gradient
        # to depends on the kernel (vmap's batched convolution or a plain one, and the tests run
        # before): both are valid subgradients, so only the values are compared for LeNet
        return
    for k in want_grad:
        torch.testing.assert_close(got_grad[k], want_grad[k], rtol=1e-4, atol=1e-4 * float(want_grad[k].abs().max()))


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.name}-{s.input_dim or s.image_size}")
def test_a_sampled_posterior_s_kept_weights_predict_bit_for_bit_as_made_afresh(spec):
    """The weights a stored-draw posterior prepares once per draw count (the thinned draws and
    the first layer as one matrix) give the very logits of a forward pass that makes them
    anew, at every count asked, after its kept counts are replaced, chunked, and pickled
    (without them)."""
    import pickle

    from core.engine.inference.base import SampledPosterior

    model = build_model(spec)
    g = torch.Generator().manual_seed(3)
    samples = {k: v.detach() + 0.05 * torch.randn(2, 6, *v.shape, generator=g) for k, v in model.named_parameters()}
    posterior = SampledPosterior("sghmc", spec, {}, 0, "mnist", samples)
    shape = (5, spec.input_dim) if spec.input_dim else (5, 1, spec.image_size, spec.image_size)
    x = torch.rand(*shape, generator=g)

    def afresh(count):
        with torch.no_grad():
            return stacked_forward(posterior._model, posterior.flat_samples(count), x)

    for count in (4, None, 4, 7, 12, None, 4):  # a third count replaces the oldest kept one
        assert torch.equal(posterior.predict_logits(x, count), afresh(count)), count
    assert len(posterior._prepared_weights) == SampledPosterior.PREPARED_KEPT
    restored = pickle.loads(pickle.dumps(posterior))
    assert "_prepared_weights" not in restored.__dict__
    assert torch.equal(restored.predict_logits(x, 7), afresh(7))
    posterior.chunk_size = 5  # chunked: the kept matrix is not used, the chunks are
    with torch.no_grad():
        chunked = stacked_forward(posterior._model, posterior.flat_samples(12), x, 5)
    assert torch.equal(posterior.predict_logits(x, 12), chunked)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.name}-{s.input_dim or s.image_size}")
def test_a_variational_posterior_s_kept_weights_predict_bit_for_bit_as_made_afresh(spec):
    """A variational posterior keeps, per draw count of its fixed bank, the named weights and the
    first layer as one matrix (issue 49: MF-VI copied its 16 or 100 draws into that matrix on
    every stroke): the logits are those of a forward pass that makes them anew from the bank's
    rows, at every count, after a new generator's bank replaced the old one, and pickled."""
    import pickle

    from core.engine.inference.param_layout import ParamLayout
    from core.engine.inference.variational import VariationalPosterior

    model = build_model(spec)
    p = ParamLayout.of(model).size
    g = torch.Generator().manual_seed(5)
    tensors = {"mean": 0.1 * torch.randn(1, p, generator=g), "diag_std": 0.05 * torch.rand(1, p, generator=g),
               "factors": torch.zeros(1, p, 0), "log_weights": torch.zeros(1)}
    posterior = VariationalPosterior("mfvi", spec, {"predict_samples": 12}, 0, "mnist", tensors)
    shape = (5, spec.input_dim) if spec.input_dim else (5, 1, spec.image_size, spec.image_size)
    x = torch.rand(*shape, generator=g)

    def afresh(count, generator=None):
        with torch.no_grad():
            theta = posterior.fixed_draws(count or 12, generator)
            return stacked_forward(posterior._model, posterior.layout.unflatten(theta.clone()), x)

    for count in (4, None, 4, 7, 12, None, 4):  # a third count replaces the oldest kept one
        assert torch.equal(posterior.predict_logits(x, count), afresh(count)), count
    assert len(posterior._prepared_weights) == VariationalPosterior.PREPARED_KEPT
    other = torch.Generator().manual_seed(9)  # another bank: its own rows, never the old bank's kept weights
    assert torch.equal(posterior.predict_logits(x, 4, other), afresh(4, other))
    assert not torch.equal(afresh(4, other), posterior.predict_logits(x, 4))  # the fixed bank again
    assert torch.equal(posterior.predict_logits(x, 4), afresh(4))
    restored = pickle.loads(pickle.dumps(posterior))
    assert "_prepared_weights" not in restored.__dict__
    assert torch.equal(restored.predict_logits(x, 7), afresh(7))
