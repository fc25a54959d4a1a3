"""The study report: one self-contained HTML file (plotly.js inlined, nothing fetched).

It shows the Pareto front (on the study's objectives, dominated and infeasible trials apart),
the front as a table with links to its models, how each knob relates to the two metrics plotted,
parameter importances per objective, failures with their reasons, the target and the
environment fingerprint of the machines that measured.

After plotly has drawn the front, a script in the page writes, for each trace of that plot (by
``uid``: ``pareto-front``, ``dominated``, ``infeasible``), its trial numbers, x, y and the number
of markers actually drawn as JSON into ``<pre id="front-data">``, so a headless browser's DOM
dump shows what was rendered.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING
from urllib.parse import quote

from automl.records import BASELINE, front_columns
from automl.service.read import pareto_front
from automl.service.studies import get_study, load

if TYPE_CHECKING:
    import plotly.graph_objects as go
    from optuna.artifacts import FileSystemArtifactStore
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial

    from automl.report._figures import Point
    from automl.search.spec import StudySpec
    from automl.service.studies import StudyInfo

FRONT_DATA_ID = "front-data"
MODEL_HREF = "models/trial-{number}.onnx"
_SPLITS_NOTE = (
    "Accuracy is that of the exported model in ONNX Runtime. The search optimised it on the "
    "validation split, so the front's validation accuracies are chosen, and optimistic; the "
    "test split was never seen by the search, and its accuracy is what to expect on new data. "
    "A large gap (val − test) means the front was chosen on noise."
)
_LOAD_NOTE = (
    "Each front model served a Poisson load at the rates its max-rate search tried, with the "
    "dynamic batching it was deployed with; latency counts from each request's arrival, "
    "queueing included. An x marks a run that did not keep up."
)
_NO_GAIN_NOTE = (
    "Each quantized trial also timed its own fp32 graph (same model, same batch) beside itself; "
    "these were no faster: their gain over it, the fp32 graph's time over theirs, is at most "
    "1.00×. The reasons come from ONNX Runtime's profiler, whose own cost per node inflates "
    "small times: the gain, measured without it, decides."
)
_NO_GAIN_ROWS = 20
_PLOT_DATA_SCRIPT = Template("""
var gd = document.getElementById('{plot_id}');
var out = {};
gd.data.forEach(function (t) {
  var layer = gd.querySelector('.scatterlayer .trace' + t.uid);
  out[t.uid] = {numbers: Array.from(t.customdata), x: Array.from(t.x), y: Array.from(t.y),
                rendered: layer ? layer.querySelectorAll('path.point').length : 0};
});
document.getElementById('$out').textContent = JSON.stringify(out);
""").substitute(out=FRONT_DATA_ID)
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1240px; color: #222; }
h1 { margin-bottom: 4px; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 4px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #666; font-style: italic; } #front-data { display: none; }
"""


def render_report_html(name: str, storage: BaseStorage, model_href: str = MODEL_HREF) -> str:
    """Render the report of study ``name`` as one self-contained HTML page.

    Args:
        name: The study.
        storage: Its storage.
        model_href: Link to a front trial's model, formatted with ``number`` and the URL-quoted
            ``name``. The default, ``models/trial-{number}.onnx``, is relative to the report and
            matches what :func:`write_report` exports; the API passes its own route, e.g.
            ``/v1/studies/{name}/trials/{number}/model``.

    Returns:
        The HTML page.

    Raises:
        StudyNotFound: No such study.
    """
    from optuna.trial import TrialState
    from plotly.offline import get_plotlyjs

    from automl.report._figures import (
        front_axes,
        importance_figure,
        knob_figure,
        pareto_figure,
        serving_figure,
    )

    study, spec = load(name, storage)
    info = get_study(name, storage)
    front = pareto_front(name, storage)
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    points = _points(complete, spec, {r["number"] for r in front if r.get("on_front", True)})
    importances = importance_figure(study, spec, complete)
    x_metric, y_metric = front_axes(spec)
    body = [
        f"<h1>Study {_e(name)}</h1>",
        _summary(info, spec, complete),
        "<h2>Pareto front</h2>",
        f'<pre id="{FRONT_DATA_ID}"></pre>',
        _plot(pareto_figure(points, spec), "pareto", _PLOT_DATA_SCRIPT),
        _note(_SPLITS_NOTE),
        _front_table(front, name, model_href, spec),
        *(
            [
                "<h2>The front under load</h2>",
                _note(_LOAD_NOTE),
                _plot(serving_figure(front, spec.serving.slo_p99_ms), "serving"),
            ]
            if spec.serving is not None
            else []
        ),
        *_no_gain(complete),
        f"<h2>Knobs against {_e(y_metric)} and {_e(x_metric)}</h2>",
        _plot(knob_figure(points, spec), "knobs") if points else _note("No complete trials."),
        "<h2>Parameter importance</h2>",
        _note(importances) if isinstance(importances, str) else _plot(importances, "importance"),
        "<h2>Failures</h2>",
        _failures(info),
        "<h2>Target and environment</h2>",
        _environment(spec, complete),
    ]
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>automl report: {_e(name)}</title><style>{_STYLE}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head>'
        f"<body>{''.join(body)}</body></html>\n"
    )


def write_report(
    name: str,
    storage: BaseStorage,
    out: Path | str,
    artifact_store: FileSystemArtifactStore | None = None,
) -> Path:
    """Write the report to ``out``, and the front's models beside it when a store is given.

    Args:
        name: The study.
        storage: Its storage.
        out: The HTML file to write; its folder is created.
        artifact_store: If given, each front trial's model is exported (ONNX and JSON sidecar)
            to ``models/trial-N.onnx`` next to ``out``, so the report's links work offline.

    Returns:
        The path of the report.

    Raises:
        StudyNotFound: No such study.
    """
    from automl.service.exports import export_model

    out = Path(out)
    page = render_report_html(name, storage)
    out.parent.mkdir(parents=True, exist_ok=True)
    if artifact_store is not None:
        for record in pareto_front(name, storage):
            model = out.parent / MODEL_HREF.format(number=record["number"])
            export_model(name, storage, artifact_store, record["number"], model)
    out.write_text(page, encoding="utf-8")
    return out


def _points(complete: list[FrozenTrial], spec: StudySpec, front: set[int]) -> list[Point]:
    from automl.records import RECORDED_METRICS
    from automl.report._figures import Point

    names = [str(c) for c in spec.constraints]
    points = []
    for trial in complete:
        if trial.number in front:
            kind = "front"
        elif any(v > 0 for v in trial.constraints.values()):
            kind = "infeasible"
        else:
            kind = "dominated"
        metrics = {k: trial.user_attrs[k] for k in RECORDED_METRICS if k in trial.user_attrs}
        violations = {c: trial.constraints[c] for c in names if c in trial.constraints}
        baseline = bool(trial.user_attrs.get(BASELINE))
        points.append(Point(trial.number, kind, metrics, trial.params, violations, baseline))
    return points


def _plot(fig: go.Figure, div_id: str, post_script: str | None = None) -> str:
    return fig.to_html(
        full_html=False,
        include_plotlyjs=False,
        div_id=div_id,
        post_script=post_script,
        config={"displaylogo": False},
    )


def _e(value: object) -> str:
    return html.escape(str(value))


def _note(text: str) -> str:
    return f'<p class="note">{_e(text)}</p>'


def _table(header: list[str], rows: list[list[str]], numeric: range = range(0)) -> str:
    """A table of already escaped cells; columns in ``numeric`` are right-aligned."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _pairs(pairs: dict[str, object], header: tuple[str, str] = ("", "")) -> str:
    return _table(list(header), [[_e(k), _e(v)] for k, v in pairs.items()])


def _summary(info: StudyInfo, spec: StudySpec, complete: list[FrozenTrial]) -> str:
    sources = Counter(t.user_attrs.get("latency_source", "unknown") for t in complete)
    counts = ", ".join(f"{k.lower()} {v}" for k, v in info.counts.items() if v)
    return _pairs(
        {
            "target": spec.target,
            "dataset": spec.dataset_shown,
            "search space": spec.search_space,
            "sampler / seed": f"{spec.sampler} / {spec.seed}",
            "objectives": ", ".join(f"{o.direction} {o.metric}" for o in spec.objectives),
            "constraints": ", ".join(str(c) for c in spec.constraints) or "none",
            "state": f"{info.state}; {counts}",
            "latency source": ", ".join(f"{s} ({n} trials)" for s, n in sources.items()) or "none",
            "created": info.created_at or "unknown",
        }
    )


def _front_table(front: list[dict], name: str, model_href: str, spec: StudySpec) -> str:
    if not front:
        return _note("No feasible complete trial yet: the front is empty.")
    columns = front_columns(spec)
    rows = []
    for record in front:
        link = model_href.format(name=quote(name, safe=""), number=record["number"])
        rows.append(
            [
                str(record["number"]),
                _knobs_cell(record),
                *(_e(column.text(record["metrics"]) or "") for column in columns),
                f'<a href="{_e(link)}">model</a>' if record["artifact_id"] else "",
            ]
        )
    header = ["trial", "knobs", *(column.label for column in columns), "model"]
    return _table(header, rows, numeric=range(2, 2 + len(columns)))


def _knobs_cell(record: dict) -> str:
    """The deployment as built and the trials it ties within noise, as the CLI's front shows
    them, above the knobs asked (a label without a candidate is its knobs already)."""
    knobs = _e(knobs_text(record["params"]))
    cell = _e(record.get("label") or "") or knobs
    if ties := record.get("ties"):
        cell += f" (ties {', '.join(map(str, ties))})"
    if (record.get("user_attrs") or {}).get("candidate"):
        cell += f"<br><small>{knobs}</small>"
    if not record.get("baseline"):
        return cell
    where = "" if record.get("on_front", True) else ", not on the front"
    return f"<b>baseline</b> (the unmodified model{where}): {cell}"


def knobs_text(params: dict[str, object]) -> str:
    """``name=value`` pairs, floats rounded to 4 significant digits (0.3, not 0.30000000000000004)."""
    from automl.report._figures import knob_label

    return ", ".join(f"{k}={knob_label(v)}" for k, v in params.items())


def _no_gain(complete: list[FrozenTrial]) -> list[str]:
    """The quantized trials that were no faster than their own fp32 graph (a gain of at most 1),
    and why."""
    rows = [
        [str(t.number), _e(f"{q['gain']:.2f}×"), _e(q["note"])]
        for t in complete
        if (q := t.user_attrs.get("quantization")) and q.get("note") and q["gain"] <= 1
    ]
    if not rows:
        return []
    return [
        "<h2>Quantized but not faster</h2>",
        _note(_NO_GAIN_NOTE),
        _table(["trial", "gain over fp32", "where the time went"], rows[:_NO_GAIN_ROWS]),
    ]


def _failures(info: StudyInfo) -> str:
    if not info.failures:
        return _note("No failed trials.")
    rows = [[str(f["number"]), _e(f["reason"]), _e(knobs_text(f["params"]))] for f in info.failures]
    return _table(["trial", "reason", "knobs"], rows)


def _environment(spec: StudySpec, complete: list[FrozenTrial]) -> str:
    """The target's declared data, then each distinct measured environment fingerprint."""
    from automl.targets import load_target

    target = load_target(spec.target)
    parts = [
        _pairs(
            {
                "target": target.name,
                "kind": target.kind,
                "description": target.description,
                "execution providers": ", ".join(target.execution_providers),
                "precisions (bits)": ", ".join(map(str, target.precisions)),
                "intra-op threads": target.intra_op_threads,
            }
        )
    ]
    envs = [t.user_attrs["env"] for t in complete if "env" in t.user_attrs]
    if not envs:
        return "".join([*parts, _note("No trial recorded an environment fingerprint yet.")])
    text = [{k: json.dumps(v, sort_keys=True) for k, v in env.items()} for env in envs]
    keys = sorted(set().union(*text))
    varying = [k for k in keys if len({env.get(k) for env in text}) > 1]
    shared = {k: envs[0][k] for k in keys if k not in varying}
    parts += [f"<p>Environment of the {len(envs)} measured trials:</p>", _pairs(shared)]
    if varying:  # one row per combination of the fields that differ, with its trials
        groups = Counter(tuple(env.get(k, "") for k in varying) for env in text)
        rows = [[*(_e(json.loads(v)) if v else "" for v in values), str(n)]
                for values, n in groups.items()]  # fmt: skip
        parts += ["<p>Fields that differ between trials:</p>", _table([*varying, "trials"], rows)]
    return "".join(parts)
