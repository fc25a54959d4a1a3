"""Pruning stage: structured channel pruning with torch-pruning, then a short fine-tune."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch_pruning as tp

from automl.candidate import TrainConfig
from automl.errors import SpecError
from automl.pipeline.train import train

if TYPE_CHECKING:
    from torch import nn

    from automl.data import Dataset


@dataclass(frozen=True)
class PruneResult:
    """The pruned, fine-tuned model and its size before and after."""

    model: nn.Module
    ratio: float
    macs_before: int
    params_before: int
    macs_after: int
    params_after: int
    history: tuple[dict, ...]


def prune(
    model: nn.Module,
    data: Dataset,
    ratio: float,
    finetune: TrainConfig,
    *,
    seed: int = 0,
    device: str = "cpu",
    threads: int = 1,
) -> PruneResult:
    """Remove ``ratio`` of the channels of every prunable layer, then fine-tune.

    The output layer ``model.classifier`` is never pruned. A ratio of 0 leaves the model
    untouched and skips the fine-tune.

    Args:
        model: A trained model with a ``classifier`` attribute; pruned in place.
        data: The dataset, used for example inputs and the fine-tune.
        ratio: Share of channels to remove, in [0, 1).
        finetune: Settings of the fine-tune after pruning.
        seed: Seed of the fine-tune.
        device: Where to fine-tune.
        threads: Torch intra-op threads on CPU.

    Returns:
        The pruned model (on CPU, eval mode) with MACs and params before and after.

    Raises:
        SpecError: The ratio is outside [0, 1).
    """
    if not 0.0 <= ratio < 1.0:
        raise SpecError(f"pruning_ratio must be in [0, 1), got {ratio}")
    model = model.cpu().eval()
    example = torch.from_numpy(data.x_train[:1])
    macs_before, params_before = tp.utils.count_ops_and_params(model, example)
    history: tuple[dict, ...] = ()
    if ratio > 0:
        pruner = tp.pruner.MetaPruner(
            model,
            example,
            importance=tp.importance.GroupMagnitudeImportance(p=2),
            pruning_ratio=ratio,
            ignored_layers=[model.classifier],
        )
        pruner.step()
        history = train(model, data, finetune, seed=seed, device=device, threads=threads).history
    model = model.cpu().eval()
    macs_after, params_after = tp.utils.count_ops_and_params(model, example)
    return PruneResult(
        model=model,
        ratio=ratio,
        macs_before=int(macs_before),
        params_before=int(params_before),
        macs_after=int(macs_after),
        params_after=int(params_after),
        history=history,
    )
