"""Comparing the fronts of two studies, e.g. one spec measured on two targets."""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING

from automl.candidate import Candidate
from automl.service.read import pareto_front
from automl.service.studies import load

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

# The knobs whose values a front's candidates are counted by.
KNOBS = ("family", "method", "batch_size")
_SHOWN = ("accuracy", "latency_per_sample_ms", "latency_p99_ms")


def compare_fronts(first: str, second: str, storage: BaseStorage) -> dict:
    """Which candidates are on which study's front, and which knobs each front favours.

    Candidates are matched by their params, so a candidate on both fronts wins on both
    devices; one on a single front wins only there. Candidates evaluated in both studies but on
    neither front are left out.

    Returns:
        ``{"studies": {name: target}, "candidates": [...], "knobs": {name: {knob: counts}}}``.
    """
    fronts = {  # a trained model's baseline is shown beside its front, not on it
        name: [t for t in pareto_front(name, storage) if t["on_front"]] for name in (first, second)
    }
    targets = {name: load(name, storage)[1].target for name in (first, second)}
    evaluated = {name: _trials_by_params(name, storage) for name in (first, second)}
    rows: dict[str, dict] = {}
    for name, front in fronts.items():
        for trial in front:
            key = _key(trial["params"])
            row = rows.setdefault(key, {"params": trial["params"], "fronts": []})
            row["user_attrs"] = {"candidate": trial["user_attrs"].get("candidate")}
            row["fronts"].append(name)
    for row in rows.values():
        key = _key(row["params"])
        row["metrics"] = {name: evaluated[name].get(key) for name in (first, second)}
    return {
        "studies": targets,
        "candidates": sorted(rows.values(), key=lambda r: (len(r["fronts"]), r["fronts"])),
        "knobs": {name: _knob_counts(front) for name, front in fronts.items()},
    }


def _trials_by_params(name: str, storage: BaseStorage) -> dict[str, dict]:
    study, _ = load(name, storage)
    return {
        _key(t.params): {k: t.user_attrs.get(k) for k in _SHOWN}
        for t in study.get_trials(deepcopy=False)
        if t.state.name == "COMPLETE"
    }


def _knob_counts(front: list[dict]) -> dict[str, dict[str, int]]:
    """How many of the front's candidates take each value of each of :data:`KNOBS`."""
    candidates = [Candidate.from_dict(t["user_attrs"]["candidate"]) for t in front]
    values = {
        "family": [c.arch.family if c.arch else "trained model" for c in candidates],
        "method": [c.method for c in candidates],
        "batch_size": [c.batch_size for c in candidates],
    }
    return {knob: dict(Counter(map(str, values[knob]))) for knob in KNOBS}


def _key(params: dict) -> str:
    return json.dumps(params, sort_keys=True)
