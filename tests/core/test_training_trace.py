"""The training trace's values: each record's loss is the mean over the steps since the previous
record, so the trace does not drop at a pass boundary as a mean restarting each pass would
(issue 47, item 4)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from core.engine.inference.base import Dataset
from core.engine.inference.elbo import train_loop
from core.engine.inference.optimisation import minibatches, optimise


def test_optimise_reports_the_mean_loss_of_the_steps_since_its_last_record():
    """With a learning rate of 0 the network never changes, so each step's loss can be computed
    again independently, from the same mini-batch order; a record's loss is their mean since the
    previous record, across pass boundaries (a pass of 5 steps, a record every 3)."""
    torch.manual_seed(0)
    data = Dataset(torch.rand(50, 1, 4, 4), torch.randint(0, 3, (50,)))
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    records = list(optimise(model, data, epochs=3, batch_size=10, lr=0.0, penalty=0.0,
                            generator=torch.Generator().manual_seed(7), report_every=3))
    order = torch.Generator().manual_seed(7)
    losses, sizes = [], []
    with torch.no_grad():
        for _ in range(3):
            for idx in minibatches(50, 10, order):
                losses.append(float(nn.functional.cross_entropy(model(data.x[idx]), data.y[idx])))
                sizes.append(len(idx))
    assert [r.step for r in records] == [3, 6, 9, 12, 15]
    previous = 0
    for record in records:
        window = range(previous, record.step)
        expected = sum(losses[i] * sizes[i] for i in window) / sum(sizes[i] for i in window)
        assert abs(record.values["loss"] - expected) < 1e-5
        previous = record.step
    assert abs(records[1].values["epoch"] - 1.2) < 1e-9  # step 6: one pass and a fifth of the next


class _Counter:
    step = 0
    scheduler = torch.optim.lr_scheduler.LambdaLR(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0),
                                                  lambda _: 1.0)


def test_variational_records_do_not_drop_at_a_pass_boundary():
    """A synthetic ELBO that rises by one per step: a mean that restarted each pass would fall
    back at every boundary; the mean since the last record rises with every record."""
    data = Dataset(torch.zeros(100, 1, 2, 2), torch.zeros(100, dtype=torch.long))

    def step(state, batch, generator):
        state.step += 1
        return state, {"elbo": float(state.step)}

    records = list(train_loop(_Counter(), data, epochs=3, batch_size=10, step=step,
                              generator=torch.Generator().manual_seed(0), report_every=4))
    elbos = [r.values["elbo"] for r in records]
    assert all(b > a for a, b in zip(elbos, elbos[1:], strict=False)), elbos
    # steps 9-10 end the first pass: the mean of 9 and 10, not the pass's mean 5.5
    assert [r.step for r in records][:4] == [4, 8, 10, 12] and elbos[:4] == [2.5, 6.5, 9.5, 11.5]


def test_time_left_starts_at_the_estimate_and_ends_at_the_run_s_own_pace():
    from core.engine.training_plan import ESTIMATE_WEIGHT_SECONDS, seconds_left

    assert seconds_left(100, 0.1, 0.0, 0) == pytest.approx(10.0)  # nothing measured: the estimate
    assert seconds_left(100, None, 0.0, 0) is None
    assert seconds_left(100, None, 2.0, 10) == pytest.approx(20.0)  # no estimate: the run's pace
    # after t seconds the run's pace weighs t / (t + T0)
    t = ESTIMATE_WEIGHT_SECONDS  # 0.2 s a step measured over T0 seconds: halfway between 0.1 and 0.2
    assert seconds_left(100, 0.1, t, round(t / 0.2)) == pytest.approx(100 * (0.5 * 0.1 + 0.5 * 0.2))
    long_run = seconds_left(100, 0.1, 1000.0, 1000)  # 1 s a step measured over 1000 s: close to it
    assert 95 < long_run < 100
    # a slow first step (3 s for one step) does not swing the line far from the estimate of 10 s
    assert seconds_left(100, 0.1, 3.0, 1) < 0.5 * 100 * 3.0
