"""Pruning stage: structured channel pruning with torch-pruning, then a short fine-tune."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch_pruning as tp

from automl.candidate import OUTPUT_LAYER, TrainConfig
from automl.errors import SpecError, TrialFailed
from automl.models import attention_heads
from automl.models import output_layer as named_layer
from automl.pipeline.train import logits_of, train

if TYPE_CHECKING:
    from torch import nn

    from automl.inputs.data import Dataset


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
    output_layer: str = OUTPUT_LAYER,
    round_to: int | None = None,
) -> PruneResult:
    """Remove ``ratio`` of the channels of every prunable layer, then fine-tune.

    The output layer (``output_layer``, ``classifier`` by default) is never pruned, nor are
    embedding tables: a transformer loses whole attention heads and MLP channels, never its
    residual width (see :func:`_pruner`). A ratio of 0 leaves the model untouched and skips
    the fine-tune. With ``finetune.kd_alpha`` > 0, the fine-tune distils
    the unpruned model's logits.

    Args:
        model: A trained model with an output layer; pruned in place.
        data: The dataset, used for example inputs and the fine-tune.
        ratio: Share of channels to remove, in [0, 1).
        finetune: Settings of the fine-tune after pruning.
        seed: Seed of the fine-tune.
        device: Where to fine-tune.
        threads: Torch intra-op threads on CPU.
        output_layer: The name of the model's output layer, which keeps its size.
        round_to: Keep a multiple of this many channels in each layer (a target's
            ``channel_multiple``); ``None`` keeps what the ratio gives.

    Returns:
        The pruned model (on CPU, eval mode) with MACs and params before and after.

    Raises:
        SpecError: The ratio is outside [0, 1), or the model has no ``output_layer``.
        TrialFailed: The pruned model no longer runs.
    """
    if not 0.0 <= ratio < 1.0:
        raise SpecError(f"pruning_ratio must be in [0, 1), got {ratio}")
    model = model.cpu().eval()
    example = torch.from_numpy(data.x_train[:1])
    macs_before, params_before = tp.utils.count_ops_and_params(model, example)
    history: tuple[dict, ...] = ()
    if ratio > 0:
        # The unpruned model is the teacher of a distilled fine-tune.
        teacher = logits_of(model, data.x_train) if finetune.kd_alpha > 0 else None
        _pruner(model, example, ratio, output_layer, round_to).step()
        _check_runs(model, example, ratio)
        history = train(
            model, data, finetune,
            seed=seed, device=device, threads=threads, teacher_logits=teacher,
        ).history  # fmt: skip
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


def _check_runs(model: nn.Module, example: torch.Tensor, ratio: float) -> None:
    """Raise ``TrialFailed`` when the pruned model no longer runs."""
    try:
        with torch.no_grad():
            model(example)
    except Exception as e:  # the user's forward, on shapes torch-pruning changed
        raise TrialFailed(
            f"the model no longer runs after pruning {ratio:g} of its channels "
            f"({type(e).__name__}: {str(e)[:200]}): its forward holds sizes that pruning "
            "cannot change (e.g. a Hugging Face attention's head size); fix pruning_ratio at "
            "0 in the search space"
        ) from None


def _pruner(
    model: nn.Module, example: torch.Tensor, ratio: float, output_layer: str, round_to: int | None
) -> tp.pruner.MetaPruner:
    """torch-pruning's pruner of ``ratio`` of the channels, and of the attention heads.

    The output layer and embedding tables are ignored: ignoring an embedding keeps the width
    of everything its output feeds (a transformer's residual stream), so attention loses
    whole heads (the q, k and v projections in step) and the MLPs their hidden channels.
    """
    heads = attention_heads(model)
    embeddings = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    return tp.pruner.MetaPruner(
        model,
        example,
        importance=tp.importance.GroupMagnitudeImportance(p=2),
        pruning_ratio=ratio,
        ignored_layers=[named_layer(model, output_layer), *embeddings],
        num_heads=heads,
        prune_num_heads=bool(heads),
        prune_head_dims=False,
        head_pruning_ratio=ratio if heads else 0.0,
        round_to=round_to,
    )
