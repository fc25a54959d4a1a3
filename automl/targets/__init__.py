"""Hardware targets: what latency is measured on, and whether this machine has it."""

from __future__ import annotations

from automl.targets._registry import (
    Peaks,
    Target,
    detect_gpu_names,
    is_present,
    list_targets,
    load_target,
    require_present,
)

__all__ = [
    "Peaks",
    "Target",
    "detect_gpu_names",
    "is_present",
    "list_targets",
    "load_target",
    "require_present",
]
