"""The optimisation loop: Adam on the mean cross-entropy plus a penalty ‖θ‖², and its mini-batches.

:func:`optimise` trains a network in place (MAP, MC dropout, the MAP phase of SWAG and Laplace, the
deep ensemble's members, the mode the curvature metrics are measured at), yielding progress; its
mini-batch order and dropout masks come from one generator, so a fit is reproducible from its seed.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterator

import torch
from torch import nn

from core.engine.inference.base import Dataset, ProgressRecord
from core.engine.models.dropout import dropout_generator


def minibatches(n: int, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Indices of one epoch in random order, in batches (the last may be smaller)."""
    order = torch.randperm(n, generator=generator)
    yield from order.split(batch_size)


def squared_norm(params: Iterator[torch.Tensor] | list[torch.Tensor]) -> torch.Tensor:
    return sum((p.pow(2).sum() for p in params), torch.zeros(()))


def optimise(
    model: nn.Module,
    data: Dataset,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    penalty: float,
    generator: torch.Generator,
    report_every: int = 20,
) -> Generator[ProgressRecord, None, None]:
    """Minimise mean cross-entropy + ``penalty``·‖θ‖² with Adam, yielding progress.

    Each record's ``loss`` and ``train_accuracy`` are means over the steps since the previous
    record (they do not restart at a pass boundary).

    The model is trained in place, in training mode (dropout on), and left in eval mode.
    Mini-batch order and dropout masks both come from ``generator``, so the fit is
    reproducible from its seed whatever else uses torch's global generator meanwhile.
    """
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    steps_per_epoch = math.ceil(len(data) / batch_size)
    total = epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(total, 1))
    step = 0
    model.train()
    try:
        with dropout_generator(model, generator):
            # loss and accuracy are means over the steps since the last report, not over the pass so far:
            # a mean that restarts each pass drops at every pass boundary, which reads as a sudden gain
            running, seen, correct = 0.0, 0, 0
            for epoch in range(epochs):
                pass_seen = 0
                for idx in minibatches(len(data), batch_size, generator):
                    x, y = data.x[idx], data.y[idx]
                    logits = model(x)
                    nll = nn.functional.cross_entropy(logits, y)
                    loss = nll + penalty * squared_norm(list(model.parameters()))
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    sched.step()
                    step += 1
                    running += nll.item() * len(y)
                    seen += len(y)
                    pass_seen += len(y)
                    correct += int((logits.argmax(-1) == y).sum())
                    if not math.isfinite(loss.item()):
                        raise FloatingPointError(
                            f"the loss became {loss.item()} at step {step}; lower the learning rate"
                        )
                    if step % report_every == 0 or step == total:
                        yield ProgressRecord(
                            step,
                            total,
                            {
                                "loss": running / seen,
                                "train_accuracy": correct / seen,
                                "epoch": epoch + pass_seen / len(data),
                                "lr": sched.get_last_lr()[0],
                            },
                        )
                        running, seen, correct = 0.0, 0, 0
    finally:
        model.eval()
