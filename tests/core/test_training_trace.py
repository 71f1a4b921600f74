"""The training trace's values: each record's loss is the mean over the steps since the previous
record, so the trace does not drop at a pass boundary as a mean restarting each pass would
(issue 47, item 4)."""

from __future__ import annotations

import torch
from torch import nn

from core.engine.inference.base import Dataset, minibatches, optimise
from core.engine.inference.variational import train_loop


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
