"""The curvature as a scaled identity plus its main directions (``metric=curvature-lowrank``).

Every expected value comes from the matrix M itself (solved, factored or multiplied in float64),
never from the metric's own products: with the whole spectrum kept the metric is M, with part of
it dropped it is c(I − UUᵀ) + UΛUᵀ built here from M's eigendecomposition and the stated rule.
"""

from __future__ import annotations

import math

import pytest
import torch

from core.engine.inference import lowrank_metric
from core.engine.inference.curvature import DenseMetric
from core.engine.inference.lowrank_metric import LowRankMetric, split_spectrum

P = 60
SHAPES = {"w": torch.Size([5, 10]), "b": torch.Size([10])}  # 60 weights as two tensors, as a head's


def _spd(p: int, values: torch.Tensor, seed: int) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(p, p, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    return q @ torch.diag(values.double()) @ q.T


def _tree(flat: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"w": flat[:, :50].reshape(-1, 5, 10), "b": flat[:, 50:]}


def _flat(tree: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([tree["w"].flatten(1), tree["b"]], 1)


def _vectors(seed: int, rows: int = 4) -> torch.Tensor:
    return torch.randn(rows, P, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.fixture
def mass() -> torch.Tensor:
    values = torch.logspace(-1, 2, P, dtype=torch.float64)  # no bulk: every eigenvalue its own
    return _spd(P, values, seed=0)


def test_with_the_whole_spectrum_kept_every_product_is_m_s_own(mass):
    metric = LowRankMetric.of_precision(mass, SHAPES, ratio=1.0, cap=P, dtype=torch.float64)
    x = _vectors(1)
    inverse_x = torch.linalg.solve(mass, x.T).T
    tol = {"rtol": 1e-10, "atol": 1e-10}
    torch.testing.assert_close(_flat(metric.velocity(_tree(x))), inverse_x, **tol)
    torch.testing.assert_close(metric.kinetic(_tree(x)), 0.5 * (x * inverse_x).sum(1), **tol)
    # the momentum's map is a square root of M and the spread's one of M⁻¹
    root = _flat(metric.momentum(_tree(x)))
    torch.testing.assert_close(_flat(metric.momentum(_tree(root))), x @ mass, **tol)
    inverse_root = _flat(metric.spread(_tree(x)))
    torch.testing.assert_close(_flat(metric.spread(_tree(inverse_root))), inverse_x, **tol)
    torch.testing.assert_close(_flat(metric.spread(metric.whiten(_tree(x)))), inverse_x, **tol)
    # and both are the symmetric ones: (M^½)ᵀ = M^½, so xᵀM^½y = yᵀM^½x
    y = _vectors(2)
    torch.testing.assert_close((x * _flat(metric.momentum(_tree(y)))).sum(1), (y * root).sum(1), **tol)


def test_the_dense_metric_and_the_full_low_rank_one_give_the_same_velocities(mass):
    dense = DenseMetric(mass, SHAPES)
    full = LowRankMetric.of_precision(mass, SHAPES, ratio=1.0, cap=P)
    x = _tree(_vectors(3).float())
    torch.testing.assert_close(_flat(full.velocity(x)), _flat(dense.velocity(x)), rtol=1e-4, atol=1e-5)


def test_momentum_and_velocity_agree_and_m_inverse_times_m_is_the_identity(mass):
    """(r, v) drawn together: v = M̃⁻¹r; and M̃⁻¹(M̃^½ M̃^½ x) = x, with part of the spectrum dropped."""
    metric = LowRankMetric.of_precision(mass, SHAPES, ratio=1.5, cap=20, dtype=torch.float64)
    assert 0 < metric.rank <= 20
    z = _tree(_vectors(4))
    r, v = metric.momentum_and_velocity(z)
    torch.testing.assert_close(_flat(v), _flat(metric.velocity(r)), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(metric.kinetic(r), 0.5 * (_flat(r) * _flat(v)).sum(1), rtol=1e-10, atol=1e-10)
    x = _vectors(5)
    twice = metric.momentum(metric.momentum(_tree(x)))
    torch.testing.assert_close(_flat(metric.velocity(twice)), x, rtol=1e-10, atol=1e-10)


def test_the_rule_keeps_the_eigenvalues_outside_a_factor_of_the_median_farthest_first():
    bulk = torch.linspace(0.9, 1.1, 50, dtype=torch.float64)  # within 1.25 of its median 1.0
    outliers = torch.tensor([31.9, 8.0, 2.0, 1.3, 0.7, 0.05, 1.2, 0.85, 1.24, 0.81], dtype=torch.float64)
    values = torch.cat([bulk, outliers])
    c, kept = split_spectrum(values, ratio=1.25, cap=100)
    assert c == float(values.median())
    outside = {v for v in values.tolist() if abs(math.log(v / c)) > math.log(1.25)}
    assert set(values[kept].tolist()) == outside and {31.9, 0.05, 1.3, 0.7} <= outside
    assert not {1.2, 0.85, 1.24, 0.81} & set(values[kept].tolist())  # within a factor 1.25
    _, capped = split_spectrum(values, ratio=1.25, cap=2)
    assert values[capped].tolist() == [31.9, 0.05]  # |log 31.9| > |log 0.05| > |log 8|
    with pytest.raises(ValueError, match="ratio"):
        split_spectrum(values, ratio=0.5)


def test_a_truncated_metric_is_c_off_its_directions_and_m_along_them():
    values = torch.cat([torch.linspace(0.95, 1.05, P - 4, dtype=torch.float64),
                        torch.tensor([40.0, 6.0, 0.2, 0.1], dtype=torch.float64)])
    mass = _spd(P, values, seed=6)
    metric = LowRankMetric.of_precision(mass, SHAPES, dtype=torch.float64)
    assert metric.rank == 4 and metric.bulk == pytest.approx(float(values.median()))
    w, q = torch.linalg.eigh(mass)
    u = q[:, (w - metric.bulk).abs() > 0.5]
    expected = metric.bulk * (torch.eye(P, dtype=torch.float64) - u @ u.T) + u @ (u.T @ mass @ u) @ u.T
    x = _vectors(7)
    torch.testing.assert_close(_flat(metric.velocity(_tree(x))), torch.linalg.solve(expected, x.T).T,
                               rtol=1e-10, atol=1e-10)
    # along a kept direction it is M exactly; off all of them, c
    assert _flat(metric.momentum(metric.momentum(_tree(u[:, :1].T)))) @ u[:, 0] == pytest.approx(
        float(u[:, 0] @ mass @ u[:, 0]), rel=1e-10)


def test_the_low_rank_form_of_a_dense_metric_keeps_its_mode_and_records(mass):
    dense = DenseMetric(mass, SHAPES)
    dense.about = {"kind": "curvature", "mode_log_posterior": -3.0}
    dense.mode = {"w": torch.ones(1, 5, 10), "b": torch.zeros(1, 10)}
    low = lowrank_metric.lowrank_of_dense(dense, ratio=1.0, cap=P)
    assert low.about["kind"] == "curvature-lowrank" and low.about["mode_log_posterior"] == -3.0
    assert low.about["rank"] == low.rank and low.mode["w"].data_ptr() != dense.mode["w"].data_ptr()
    x = _tree(_vectors(8).float())
    torch.testing.assert_close(_flat(low.velocity(x)), _flat(dense.velocity(x)), rtol=1e-3, atol=1e-4)


def test_non_positive_eigenvalues_are_refused():
    with pytest.raises(ValueError, match="positive"):
        LowRankMetric(torch.tensor([1.0, -1.0]), torch.eye(P)[:, :2], 1.0, SHAPES)
