"""Training stage: AdamW with a fixed seed and pinned threads, on CPU or CUDA."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from automl.candidate import TrainConfig
from automl.errors import TrialFailed

if TYPE_CHECKING:
    from automl.inputs.data import Dataset


@dataclass(frozen=True)
class TrainResult:
    """The trained model and one history record per epoch."""

    model: nn.Module
    history: tuple[dict, ...]


def train(
    model: nn.Module,
    data: Dataset,
    config: TrainConfig,
    *,
    seed: int = 0,
    device: str = "cpu",
    threads: int = 1,
    teacher_logits: np.ndarray | None = None,
) -> TrainResult:
    """Train ``model`` on ``data.x_train`` with AdamW and cross-entropy.

    With ``teacher_logits`` (one row per training sample) and ``config.kd_alpha`` > 0, the loss
    is ``(1 - a) * CE + a * T² * KL(teacher || student)`` at temperature ``T``: knowledge
    distillation, as Hinton et al. (2015) define it.

    Args:
        model: The model to train in place.
        data: The dataset; validation accuracy is recorded after each epoch.
        config: Epochs, learning rate, weight decay and training batch size.
        seed: Seeds weight updates and shuffling.
        device: ``cpu`` or ``cuda``.
        threads: Torch intra-op threads on CPU.
        teacher_logits: A teacher's logits on ``data.x_train``, for distillation.

    Returns:
        The trained model (on CPU, in eval mode) and its history.

    Raises:
        TrialFailed: An epoch's loss is not finite: training diverged.
    """
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model.to(device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(config.epochs, 1))
    # The arrays go to the device once; batches are indexed there.
    x = torch.from_numpy(data.x_train).to(device)
    y = torch.from_numpy(data.y_train).to(device)
    teacher = None if teacher_logits is None else torch.from_numpy(teacher_logits).to(device)
    history = []
    for epoch in range(config.epochs):
        model.train()
        # Drawn on the CPU generator, so a seed gives the same order on every device.
        order = torch.randperm(len(x), generator=generator).to(device)
        # Summed on the device in float64, read once per epoch: no host sync per step.
        total_loss = torch.zeros((), dtype=torch.float64, device=device)
        for start in range(0, len(x), config.batch_size):
            rows = order[start : start + config.batch_size]
            logits = model(x[rows])
            loss = nn.functional.cross_entropy(logits, y[rows])
            if teacher is not None and config.kd_alpha > 0:
                kd = _distillation(logits, teacher[rows], config.kd_temperature)
                loss = (1 - config.kd_alpha) * loss + config.kd_alpha * kd
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total_loss += loss.detach().double() * len(rows)
        scheduler.step()
        mean_loss = total_loss.item() / len(x)
        if not math.isfinite(mean_loss):
            raise TrialFailed(
                f"training diverged: the loss of epoch {epoch + 1} is {mean_loss}; a lower "
                f"learning rate than train.lr {config.lr:g} may train"
            )
        val_accuracy = accuracy(model, data.x_val, data.y_val, device=device)
        history.append({"epoch": epoch + 1, "loss": mean_loss, "val_accuracy": val_accuracy})
    return TrainResult(model=model.cpu().eval(), history=tuple(history))


def _distillation(logits: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL divergence of the student's softened distribution from the teacher's, times T²."""
    return nn.functional.kl_div(
        nn.functional.log_softmax(logits / temperature, dim=1),
        nn.functional.log_softmax(teacher / temperature, dim=1),
        reduction="batchmean",
        log_target=True,
    ) * (temperature**2)


@torch.no_grad()
def logits_of(model: nn.Module, x: np.ndarray, *, batch_size: int = 512) -> np.ndarray:
    """A model's logits on ``x``, in eval mode on the CPU (a teacher's, for distillation)."""
    model.eval()
    out = [model(torch.from_numpy(x[i : i + batch_size])) for i in range(0, len(x), batch_size)]
    return torch.cat(out).numpy()


@torch.no_grad()
def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray, *, device: str = "cpu") -> float:
    """Top-1 accuracy of a torch model on arrays, in eval mode."""
    model.eval()
    logits = model(torch.from_numpy(x).to(device))
    return float((logits.argmax(dim=1).cpu().numpy() == y).mean())
