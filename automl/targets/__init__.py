"""Hardware targets: what latency is measured on, and whether this machine has it."""

from __future__ import annotations

from automl.targets._registry import Peaks, Target, list_targets, load_target
from automl.targets.nvidia_smi import detect_gpu_names
from automl.targets.presence import device_refusal, is_present, matching_gpus, require_present

__all__ = [
    "Peaks",
    "Target",
    "detect_gpu_names",
    "device_refusal",
    "is_present",
    "list_targets",
    "load_target",
    "matching_gpus",
    "require_present",
]
