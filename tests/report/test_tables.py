"""The CLI's tables: what they show, and that they fit the terminal."""

from __future__ import annotations

from types import SimpleNamespace

import optuna
from rich.console import Console

from automl.catalog import METHODS
from automl.records import BUILT, TrialRecord
from automl.report.tables import front_table, methods_table, targets_table
from automl.search.spec import parse_spec
from automl.targets import list_targets

TRAINED = SimpleNamespace(
    name="my-cnn", target="cpu", model=object(), serving=None,
    objectives=[SimpleNamespace(metric="accuracy_drop"), SimpleNamespace(metric="speedup")],
)  # fmt: skip


def _record(number: int, method: str, deployed: str, batch: int, **metrics: float) -> TrialRecord:
    candidate = {"arch": None, "pruning_ratio": 0.0, "method": method, "batch_size": batch,
                 "keep_fp32": 4 if method == "int8-mixed" else 0}  # fmt: skip
    attrs = {"candidate": candidate, "history": {BUILT: {"method": deployed, "widths": [32]}},
             "baseline": number == 0, **metrics}  # fmt: skip
    trial = optuna.trial.create_trial(values=[0.0, 1.0], user_attrs=attrs)
    trial.number = number
    return TrialRecord.of(trial, ["accuracy_drop", "speedup"], on_front=number > 0)


def _printed(table: object, width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    console.print(table)
    return console.export_text().splitlines()


def test_the_front_shows_the_models_own_speedup_beside_the_batching_gain() -> None:
    # An int8-mixed whose keep_fp32 covers all 4 layers of the model: fp32 served at batch 32.
    front = [
        _record(0, "fp32", "fp32", 1, speedup=1.0, speedup_same_batch=1.0, accuracy_drop=0.0),
        _record(3, "int8-mixed", "fp32", 32, speedup=5.36, speedup_same_batch=0.996,
                accuracy_drop=0.0),
    ]  # fmt: skip
    lines = _printed(front_table(front, TRAINED), 120)
    row = next(line for line in lines if line.startswith("│     3"))
    assert "5.36×" in row and "1.00×" in row and "fp32 (all layers kept)" in row
    assert "int8" not in " ".join(lines)  # no row claims a quantized method
    said = " ".join(" ".join(lines).split())
    assert "speedup with batching: the baseline at batch 1 against the row at its own" in said
    assert "speedup at same batch: the model's own, both at the row's batch" in said


def test_a_narrow_front_keeps_trial_and_candidate_whole_and_cuts_no_number() -> None:
    front = [_record(12, "int8-static", "int8-static", 128, speedup=25.5731,
                     speedup_same_batch=3.1, accuracy_drop=-0.0123, macs=3075701.0)]  # fmt: skip
    for width in (40, 60, 80, 200):
        lines = _printed(front_table(front, TRAINED), width)
        assert max(map(len, lines)) <= width and "…" not in "".join(lines)
        rows = [line.split("│")[1:3] for line in lines if line.startswith("│")]
        assert rows[0][0].strip() == "12"
        assert " ".join(" ".join(c[1] for c in rows).split()) == front[0].label
        assert ("25.57×" in "".join(lines)) == (width >= 60)  # the objectives go last


def test_methods_and_targets_fit_80_columns_with_every_name_whole() -> None:
    offered = {m: [t.name for t in list_targets() if m in t.methods] for m in METHODS}
    methods = _printed(methods_table(list(METHODS.values()), offered), 80)
    assert len(methods) <= 40 and max(map(len, methods)) <= 80  # 131 lines before
    names = [line.split("│")[1].strip() for line in methods if line.startswith("│")]
    assert [n for n in names if n] == list(METHODS)
    rows = [(t, t.name == "cpu") for t in list_targets()]
    targets = _printed(targets_table(rows, {"openvino": "not installed"}), 80)
    assert max(map(len, targets)) <= 80 and "…" not in "".join(targets)
    assert " ".join(targets).count("ort-tensorrt") == 4
    assert "openvino (absent)" in " ".join(targets)


def test_a_wide_console_shows_every_column() -> None:
    front = [_record(1, "fp32", "fp32", 8, accuracy=0.9, latency_per_sample_ms=0.01)]
    printed = "\n".join(_printed(front_table(front, parse_spec({})), 200))
    assert "samples/s" in printed and "MACs" in printed and "left out" not in printed
