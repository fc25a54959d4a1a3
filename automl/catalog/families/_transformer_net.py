"""The ``transformer`` family: an encoder over int64 token ids (N, L), for classification.

Attention is written with ``nn.Linear`` projections ``q``, ``k`` and ``v``, so that
torch-pruning can remove whole heads (see :func:`attention_heads`), and the head size is
fixed: the number of heads follows from the projections' width, before and after pruning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from automl.candidate import ArchConfig


class Transformer(nn.Module):
    """Token and learned position embeddings, pre-norm encoder layers, mean pooling, classifier.

    Args:
        arch: ``width`` is d_model, ``depth`` the number of layers, ``heads`` and
            ``mlp_ratio`` shape each layer.
        seq_len: The sequence length L of the data (fixed).
        vocab_size: Token ids lie in ``[0, vocab_size)``.
        num_classes: Number of output logits.
    """

    def __init__(self, arch: ArchConfig, seq_len: int, vocab_size: int, num_classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, arch.width)
        self.position = nn.Embedding(seq_len, arch.width)
        self.register_buffer("positions", torch.arange(seq_len), persistent=False)
        self.drop = nn.Dropout(arch.dropout)
        hidden = max(1, round(arch.width * arch.mlp_ratio))
        self.layers = nn.Sequential(
            *(EncoderLayer(arch.width, arch.heads, hidden, arch.dropout) for _ in range(arch.depth))
        )
        self.norm = nn.LayerNorm(arch.width)
        self.classifier = nn.Linear(arch.width, num_classes)

    def forward(self, x):
        h = self.drop(self.embed(x) + self.position(self.positions))
        return self.classifier(self.norm(self.layers(h)).mean(dim=1))


class EncoderLayer(nn.Module):
    """Pre-norm self-attention and a GELU MLP, each on a residual connection."""

    def __init__(self, width: int, heads: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = SelfAttention(width, heads)
        self.norm2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.drop(self.attn(self.norm1(x)))
        return x + self.drop(self.fc2(self.act(self.fc1(self.norm2(x)))))


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention of fixed head size."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.head_dim = width // heads
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, width)
        self.v = nn.Linear(width, width)
        self.out = nn.Linear(width, width)

    @property
    def num_heads(self) -> int:
        """Heads left: the projections' width over the head size."""
        return self.q.out_features // self.head_dim

    def forward(self, x):
        batch, length, _ = x.shape
        q, k, v = (
            p(x).reshape(batch, length, -1, self.head_dim).transpose(1, 2)
            for p in (self.q, self.k, self.v)
        )
        weights = torch.softmax(q @ k.transpose(-2, -1) * self.head_dim**-0.5, dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(batch, length, -1))


def attention_heads(model: nn.Module) -> dict[nn.Module, int]:
    """The head count of every q, k and v projection of ``model``'s attention layers.

    torch-pruning's ``MetaPruner(num_heads=...)`` takes it to remove whole heads.
    """
    return {
        projection: layer.num_heads
        for layer in model.modules()
        if isinstance(layer, SelfAttention)
        for projection in (layer.q, layer.k, layer.v)
    }
