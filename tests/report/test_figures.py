"""The report's figures: plotted on the study's objectives, readable in real headless Chromium.

A serving study and a trained model's study are written into a real SQLite storage with the
attrs their trials record (running them would take minutes); their reports are rendered and
probed in Chromium (see report_pages.py). The classifier study's report, from a real run, is
probed in test_html.py.
"""

from __future__ import annotations

import html
import random
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import create_trial
from report_pages import chromium, probed_layout, unreadable, with_layout_probe

from automl.records import constraint_attrs
from automl.report._figures import (
    FRONT_TRACE_UID,
    Point,
    front_axes,
    importance_figure,
    importance_trials_needed,
    log_ticks,
    pareto_figure,
)
from automl.report.html import write_report
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.settings import Settings
from automl.storage.factory import open_storage

# Their module fixtures render pages in Chromium: one process runs all its tests, so they run once.
pytestmark = pytest.mark.xdist_group("test_figures")

SERVING = {
    "name": "load",
    "search_space": "digits-serving",
    "n_trials": 10,
    "serving": {"rate_rps": "max", "slo_p99_ms": 50, "duration_s": 0.5},
}
TRAINED = {
    "name": "trained",
    "model": {"factory": "trained_factories:digits_cnn", "weights": "w.pt"},
    "n_trials": 10,
}
_SERVING_KNOBS = {
    "arch.family": CategoricalDistribution(["mlp", "cnn"]),
    "arch.width": IntDistribution(16, 64, step=16),
    "arch.depth": IntDistribution(1, 2),
    "pruning_ratio": FloatDistribution(0.0, 0.5, step=0.25),
    "method": CategoricalDistribution(["fp32", "int8-dynamic"]),
    "serving.max_batch": CategoricalDistribution([1, 8, 32]),
    "serving.max_queue_delay_ms": CategoricalDistribution([0, 1]),
    "serving.instances": CategoricalDistribution([1, 2]),
}
_TRAINED_KNOBS = {
    "pruning_ratio": FloatDistribution(0.0, 0.6, step=0.1),
    "finetune_epochs": IntDistribution(1, 4),
    "finetune_lr": CategoricalDistribution([0.0003, 0.001, 0.003]),
    "kd_alpha": CategoricalDistribution([0.0, 0.5, 0.9]),
    "method": CategoricalDistribution(["fp32", "int8-static", "int8-mixed", "int8-dynamic"]),
    "batch_size": CategoricalDistribution([1, 8, 32]),
}
# The quantized trials' gains over their fp32 graphs: one slower, two faster by a little.
GAINS = {2: 0.62, 5: 1.02, 7: 1.12}


def _params(knobs: dict, rng: random.Random) -> dict:
    """A value of each knob, drawn from its distribution."""
    params = {}
    for name, d in knobs.items():
        if isinstance(d, CategoricalDistribution):
            params[name] = rng.choice(d.choices)
        else:
            step = rng.randint(0, round((d.high - d.low) / d.step))
            params[name] = type(d.low)(f"{d.low + d.step * step:.10g}")
    return params


def _serving_trial(number: int, rng: random.Random) -> optuna.trial.FrozenTrial:
    """Figures as this 2-core host measured them: max rates of 0.7 to 1.6 million requests/s
    (within one decade), accuracies of 0.93 to 0.97."""
    params = _params(_SERVING_KNOBS, rng) | {
        "method": "int8-dynamic" if number in GAINS else "fp32"
    }
    accuracy, rate = rng.uniform(0.93, 0.97), rng.uniform(7e5, 1.6e6)
    runs = [
        {"offered_rps": offered, "p99_bound_ms": p99, "kept_up": p99 < 400}
        for offered, p99 in ((rate * 0.7, 12.0), (rate, 45.0), (rate * 1.4, 500.0))
    ]
    attrs = {
        "accuracy": accuracy,
        "test_accuracy": accuracy - 0.005,
        "max_rate_rps": rate,
        "serving_p99_ms": 45.0,
        "latency_per_sample_ms": 1000 / rate,
        "latency_p99_ms": 0.03,
        "feasible": True,
        "serving": {"runs": runs},
    }
    if number in GAINS:
        gain = GAINS[number]
        attrs["quantization"] = {"gain": gain, "note": f"quantized but not faster (gain {gain})"}
    return create_trial(
        values=[accuracy, rate], params=params, distributions=_SERVING_KNOBS, user_attrs=attrs
    )


def _trained_trial(number: int, rng: random.Random) -> optuna.trial.FrozenTrial:
    """A trained CNN's deployments: speedups of 0.2 to 5 over its baseline (trial 0)."""
    params = _params(_TRAINED_KNOBS, rng) | {"method": "int8-static" if number in GAINS else "fp32"}
    drop, speedup = (0.0, 1.0) if number == 0 else (rng.uniform(0, 0.06), rng.uniform(0.17, 5))
    attrs = {
        "accuracy": 0.986 - drop,
        "test_accuracy": 0.99 - drop,
        "accuracy_drop": drop,
        "speedup": speedup,
        "latency_per_sample_ms": 0.06 / speedup,
        "feasible": drop <= 0.01,
        "baseline": number == 0,
    }
    if number in GAINS:
        gain = GAINS[number]
        attrs["quantization"] = {"gain": gain, "note": f"quantized but not faster (gain {gain})"}
    return create_trial(
        values=[drop, speedup],
        params=params,
        distributions=_TRAINED_KNOBS,
        user_attrs=attrs,
        system_attrs=constraint_attrs([drop - 0.01]),
    )


def _report(root: Path, spec: dict, trial: object) -> Path:
    storage = open_storage(f"sqlite:///{root / 'automl.db'}", Settings())
    study = create_study(parse_spec(spec), storage)
    rng = random.Random(0)
    for number in range(spec["n_trials"]):
        study.add_trial(trial(number, rng))
    return write_report(spec["name"], storage, root / "report.html")


@pytest.fixture(scope="module", params=["serving", "trained"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def page(kind: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    """The report of a study of ``kind``: its DOM in Chromium and the layout of its plots."""
    root = tmp_path_factory.mktemp(kind)
    spec, trial = (SERVING, _serving_trial) if kind == "serving" else (TRAINED, _trained_trial)
    report = with_layout_probe(_report(root, spec, trial))
    dom = chromium(root / "profile", "--window-size=1280,2000", "--dump-dom", report.as_uri())
    return dom, probed_layout(dom)


def test_every_plot_reads_in_the_browser(page: tuple[str, dict], kind: str) -> None:
    _, layout = page
    assert {"pareto", "knobs"} <= set(layout)
    for name, plot in layout.items():
        assert not unreadable(plot), (kind, name, unreadable(plot))


def test_the_front_is_plotted_on_the_studys_objectives(page: tuple[str, dict], kind: str) -> None:
    _, layout = page
    x, y = ("max_rate_rps", "accuracy") if kind == "serving" else ("speedup", "accuracy_drop")
    pareto = layout["pareto"]
    assert pareto["title"] == f"Pareto front: {y} against {x}"
    assert pareto["axes"]["x"]["title"].startswith(f"{x} (")
    assert "higher is better" in pareto["axes"]["x"]["title"]
    assert pareto["axes"]["y"]["title"].startswith(f"{y} (")
    assert "latency" not in pareto["title"]


def test_importances_wait_for_enough_complete_trials(page: tuple[str, dict], kind: str) -> None:
    dom, layout = page
    knobs = len(_SERVING_KNOBS if kind == "serving" else _TRAINED_KNOBS)
    assert "importance" not in layout  # 10 trials: fANOVA would credit knobs with noise
    said = (
        f"Parameter importances need at least {max(20, 4 * knobs)} complete trials (20, and 4 "
        f"per searched knob: {knobs} here); this study has 10."
    )
    assert html.escape(said) in dom


def test_quantized_but_not_faster_lists_only_gains_of_at_most_one(
    page: tuple[str, dict], kind: str
) -> None:
    dom, _ = page
    assert "Quantized but not faster" in dom
    assert "0.62×" in dom
    assert "1.02×" not in dom and "1.12×" not in dom


def test_importances_from_the_stated_number_of_trials() -> None:
    spec = parse_spec({"name": "few", "objectives": ["accuracy", "latency_per_sample_ms"]})
    study = optuna.create_study(directions=["maximize", "minimize"])
    distributions = {"width": IntDistribution(16, 128), "bits": CategoricalDistribution([8, 32])}
    rng = random.Random(0)
    for _ in range(importance_trials_needed(2)):
        width, bits = rng.randint(16, 128), rng.choice([8, 32])
        values = [0.9 + width / 2000, bits * width / 1e5 + rng.uniform(0, 1e-4)]
        params = {"width": width, "bits": bits}
        study.add_trial(create_trial(values=values, params=params, distributions=distributions))
    complete = study.get_trials()
    assert isinstance(importance_figure(study, spec, complete[:-1]), str)
    figure = importance_figure(study, spec, complete)
    assert not isinstance(figure, str)
    assert "fANOVA over 20 complete trials" in figure.layout.title.text


@pytest.mark.parametrize(
    ("objectives", "axes"),
    [
        (["accuracy", "latency_per_sample_ms"], ("latency_per_sample_ms", "accuracy")),
        (["accuracy", "size_mb", "latency_p99_ms"], ("latency_p99_ms", "accuracy")),
        (["accuracy"], ("latency_per_sample_ms", "accuracy")),
        (["size_mb", "accuracy"], ("size_mb", "accuracy")),
    ],
)
def test_front_axes_follow_the_objectives(objectives: list[str], axes: tuple[str, str]) -> None:
    assert front_axes(parse_spec({"name": "s", "objectives": objectives})) == axes


@pytest.mark.parametrize(
    ("objective", "points", "corner"),
    [  # minimised, the slower point is the more accurate; maximised, the faster the less
        ("latency_per_sample_ms", [(1.0, 0.90), (2.0, 0.95)], (2.0, 0.90)),
        ("throughput_sps", [(1.0, 0.95), (2.0, 0.90)], (1.0, 0.90)),
    ],
)
def test_the_front_line_turns_at_the_corner_worse_than_its_points(
    objective: str, points: list[tuple[float, float]], corner: tuple[float, float]
) -> None:
    """The staircase through two front points bounds what they dominate: it turns at the
    corner worse than both in each objective, never at one better than both."""
    spec = parse_spec({"name": "s", "objectives": ["accuracy", objective]})
    front = [
        Point(n, "front", {objective: x, "accuracy": y}, {}, {}) for n, (x, y) in enumerate(points)
    ]
    line = next(t for t in pareto_figure(front, spec).data if t.uid == FRONT_TRACE_UID)
    # plotly's "hv" goes across to the next x first, "vh" up or down to the next y first.
    turn = (line.x[1], line.y[0]) if line.line.shape == "hv" else (line.x[0], line.y[1])
    assert turn == corner


@pytest.mark.parametrize(
    "values",
    [[718_750, 1_062_500], [1.0, 4.9], [0.00027, 0.008], [150, 600], [1e-5, 2e-5], [3, 3]],
)
def test_log_ticks_label_any_range_in_plain_numbers(values: list[float]) -> None:
    ticks = log_ticks(values)
    low, high = min(values), max(values)
    inside = [t for t in ticks["tickvals"] if low <= t <= high]
    assert len(inside) >= (3 if high > low else 1)
    for text in ticks["ticktext"]:
        assert "e" not in text and "µ" not in text
