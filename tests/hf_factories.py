"""A tiny Hugging Face classifier, built from a config: no hub download.

Importable as ``hf_factories:tiny_bert`` by the tests that optimize a ``transformers`` model.
"""

from __future__ import annotations

from torch import nn

VOCAB_SIZE = 32
LENGTH = 16


def tiny_bert() -> nn.Module:
    """A two-layer BERT sequence classifier over ``VOCAB_SIZE`` token ids, two labels."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=LENGTH, num_labels=2,
        attn_implementation="eager",
    )  # fmt: skip
    return BertForSequenceClassification(config)
