"""Models that run once and then raise, importable as ``flaky_model:<factory>``.

A study's model check runs the model a second time to find its output layer, where it expects
nothing to fail: the error reaches the worker's input check as the model raised it. The REST
tests copy this file into a server's factory folder as ``mymodel.py``.
"""

from __future__ import annotations

import errno
import os

import numpy as np
import torch
from torch import nn


class Flaky(nn.Module):
    """A linear model over the 8x8 digits whose runs after the first ``good`` call ``fail``."""

    def __init__(self, fail, good: int = 1) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 10)
        self.fail = fail
        self.good = good
        self.runs = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.runs += 1
        if self.runs > self.good:
            self.fail()
        return self.fc(x.flatten(1))


def _exhausted() -> None:
    raise LookupError("codebook exhausted after one batch")


def _disk_error() -> None:
    raise OSError(errno.EIO, os.strerror(errno.EIO), "codebook.bin")


def _numpy_out_of_memory() -> None:
    np.empty(2**50)  # 8 PiB: more than any host's address space


def _torch_out_of_memory() -> None:
    torch.empty(2**50)  # torch's CPU allocator raises a RuntimeError


def build() -> nn.Module:
    """A bug of the user's code: a ``LookupError`` on every host."""
    return Flaky(_exhausted)


def disk_error() -> nn.Module:
    """An ``OSError`` (EIO) reading a file: this host's trouble."""
    return Flaky(_disk_error)


def numpy_out_of_memory() -> nn.Module:
    """A real ``MemoryError`` from numpy: this host's trouble."""
    return Flaky(_numpy_out_of_memory)


def torch_out_of_memory() -> nn.Module:
    """A real failed allocation of torch's CPU allocator: this host's trouble."""
    return Flaky(_torch_out_of_memory)


def out_of_memory_at_once() -> nn.Module:
    """A real ``MemoryError`` on the model's first run, where the check first runs it."""
    return Flaky(_numpy_out_of_memory, good=0)
