"""The HTML report of a study run by the real CLI, rendered in real headless Chromium."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from conftest import FEASIBLE_AND_INFEASIBLE, SIZE_BUDGET, run_cli_study
from optuna.distributions import IntDistribution
from optuna.trial import TrialState, create_trial
from report_pages import chromium, probed_layout, unreadable, with_layout_probe

from automl.records import TrialRecord
from automl.report._figures import front_axes
from automl.report.html import FRONT_DATA_ID, _knobs_cell, write_report
from automl.service.read import pareto_front
from automl.service.studies import load

# Its module fixtures run studies: one process runs all its tests, so they run once.
pytestmark = pytest.mark.xdist_group("test_html")

NAME = "rep"
REASON = "RuntimeError: <b>export failed</b> & <script>alert(1)</script>"
SPEC = {
    "name": NAME,
    "search_space": "digits-mlp",
    "n_trials": 4,
    "constraints": SIZE_BUDGET,
}


@pytest.fixture(scope="module")
def study_run(tmp_path_factory: pytest.TempPathFactory, zygote) -> dict:
    run = run_cli_study(tmp_path_factory.mktemp("report"), SPEC, FEASIBLE_AND_INFEASIBLE, zygote)
    failed = create_trial(
        state=TrialState.FAIL,
        params={"arch.width": 16},
        distributions={"arch.width": IntDistribution(16, 128, step=16)},
        user_attrs={"fail_reason": REASON},
    )
    run["study"].add_trial(failed)  # a failure with markup in its reason, which must be escaped
    return run


@pytest.fixture(scope="module")
def report(study_run: dict) -> Path:
    out = study_run["root"] / "out" / "report.html"
    assert write_report(NAME, study_run["storage"], out, artifact_store=study_run["store"]) == out
    return out


@pytest.fixture(scope="module")
def dom(report: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    profile = tmp_path_factory.mktemp("profile")
    page = with_layout_probe(report).as_uri()
    return chromium(profile, "--window-size=1280,2000", "--dump-dom", page)


def _plotted(dom: str) -> dict:
    match = re.search(rf'<pre id="{FRONT_DATA_ID}">(.*?)</pre>', dom, re.S)
    assert match and match[1], "the Pareto plot did not render"
    return json.loads(match[1])


def test_plotted_front_equals_stored_front(dom: str, study_run: dict) -> None:
    _, spec = load(NAME, study_run["storage"])
    x_metric, y_metric = front_axes(spec)
    front = sorted(pareto_front(NAME, study_run["storage"]), key=lambda r: r["metrics"][x_metric])
    plotted = _plotted(dom)["pareto-front"]
    assert front, "the stored front is empty"
    assert plotted["rendered"] == len(front)
    assert plotted["numbers"] == [r["number"] for r in front]
    assert plotted["x"] == [r["metrics"][x_metric] for r in front]
    assert plotted["y"] == [r["metrics"][y_metric] for r in front]


def test_dominated_and_infeasible_apart(dom: str, study_run: dict) -> None:
    study, _ = load(NAME, study_run["storage"])
    complete = study.get_trials(states=[TrialState.COMPLETE])
    infeasible = {t.number for t in complete if t.user_attrs["feasible"] is False}
    front = {r["number"] for r in pareto_front(NAME, study_run["storage"])}
    plotted = _plotted(dom)
    assert infeasible, "the fixture's size constraint should make a trial infeasible"
    assert set(plotted["infeasible"]["numbers"]) == infeasible
    assert set(plotted["dominated"]["numbers"]) == {t.number for t in complete} - front - infeasible
    for trace in plotted.values():
        assert trace["rendered"] == len(trace["numbers"])


def test_the_front_tables_of_the_report_and_the_cli_share_their_columns(dom: str) -> None:
    from rich.console import Console

    from automl.records import front_columns
    from automl.report.tables import front_table
    from automl.search.spec import parse_spec

    labels = [c.label for c in front_columns(parse_spec({}))]
    header = re.search(r"<tr><th>trial</th><th>knobs</th>(.*?)<th>model</th></tr>", dom)[1]
    assert re.findall(r"<th[^>]*>([^<]*)</th>", header) == [html.escape(x) for x in labels]
    row = {"number": 3, "params": {}, "metrics": {"accuracy": 0.9, "test_accuracy": 0.85}}
    console = Console(record=True, width=400)
    console.print(front_table([row], parse_spec({})))
    printed = console.export_text()
    assert all(c.label in printed for c in front_columns(parse_spec({}), brief=True))
    assert "val − test" in labels and "val − test" not in printed  # the report's alone


def test_the_front_table_names_each_row_as_built_as_the_cli_front_does(
    dom: str, study_run: dict
) -> None:
    front = pareto_front(NAME, study_run["storage"])
    table = re.search(r"<th>knobs</th>.*?</table>", dom, re.S)[0]
    cells = re.findall(r"<tr><td[^>]*>\d+</td><td>(.*?)<br>", table)
    assert cells == [html.escape(r["label"]) for r in front]


def test_a_front_cell_shows_the_label_built_its_ties_and_the_knobs_asked() -> None:
    params = {"arch.width": 16, "pruning_ratio": 0.2}
    record = TrialRecord(
        number=12, state="COMPLETE", values={}, params=params, metrics={}, feasible=True,
        artifact_id=None, fail_reason=None, baseline=False, user_attrs={"candidate": params},
        on_front=True, label="mlp w8 d1 (w16 prune 0.2) <int8>", ties=(5, 7),
    )  # fmt: skip
    assert _knobs_cell(record) == (
        "mlp w8 d1 (w16 prune 0.2) &lt;int8&gt; (ties 5, 7)"
        "<br><small>arch.width=16, pruning_ratio=0.2</small>"
    )


def test_front_table_links_to_exported_models(dom: str, report: Path, study_run: dict) -> None:
    for record in pareto_front(NAME, study_run["storage"]):
        link = f"models/trial-{record['number']}.onnx"
        assert f'href="{link}"' in dom
        assert (report.parent / link).stat().st_size > 0
        assert (
            json.loads((report.parent / link).with_suffix(".json").read_text())["trial"]
            == (record["number"])
        )


def test_sections_failures_and_environment(dom: str, study_run: dict) -> None:
    study, _ = load(NAME, study_run["storage"])
    env = study.trials[0].user_attrs["env"]
    for heading in ("Pareto front", "Knobs against", "Parameter importance", "Failures"):
        assert heading in dom
    assert "need at least 24 complete trials" in dom  # 4 trials, 6 knobs: a note, not noise
    assert "RuntimeError: &lt;b&gt;export failed&lt;/b&gt; &amp; &lt;script&gt;" in dom
    assert "<script>alert(1)" not in dom
    assert env["cpu_model"] in dom and env["onnxruntime"] in dom
    assert "CPUExecutionProvider" in dom
    assert dom.count("Environment of the") == 1  # one table, not one per fingerprint
    envs = [t.user_attrs["env"] for t in study.trials if "env" in t.user_attrs]
    differ = any(e.get("placement") != envs[0].get("placement") for e in envs)
    assert ("Fields that differ between trials" in dom) == differ


def test_self_contained(report: Path) -> None:
    from plotly.offline import get_plotlyjs

    page = report.read_text()
    assert get_plotlyjs() in page
    own = page.replace(get_plotlyjs(), "")
    assert "Plotly.newPlot" in own
    assert not re.search(r"https?://|<script[^>]* src=|<link ", own)


def test_screenshot(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    chromium(
        tmp_path / "profile", "--window-size=1280,2000", f"--screenshot={shot}", report.as_uri()
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 50_000  # a blank page of this size compresses to a few kB


def test_quantized_trials_that_did_not_pay_say_why(dom: str, study_run: dict) -> None:
    study, _ = load(NAME, study_run["storage"])
    records = [t.user_attrs["quantization"] for t in study.trials if "quantization" in t.user_attrs]
    assert records  # trial 0 is an 8-bit MLP
    notes = [r["note"] for r in records if r["note"] and r["gain"] <= 1]
    assert ("Quantized but not faster" in dom) == bool(notes)
    for note in notes:
        assert html.escape(note, quote=False) in dom


def test_every_plot_reads_in_the_browser(dom: str) -> None:
    layout = probed_layout(dom)
    assert set(layout) == {"pareto", "knobs"}  # 4 trials: no importances, no load
    assert layout["pareto"]["title"] == "Pareto front: accuracy against latency_per_sample_ms"
    assert "latency_per_sample_ms (ms, log scale; lower is better)" in {
        axis["title"] for axis in layout["pareto"]["axes"].values()
    }
    for name, plot in layout.items():
        assert not unreadable(plot), (name, unreadable(plot))
