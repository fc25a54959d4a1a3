"""Plotly figures of the study report: the Pareto front, the knobs, the importances, and the
front under load.

The front is plotted on the study's own objectives (:func:`front_axes`). Log axes carry their
own ticks (:func:`log_ticks`), labelled with plain numbers."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from automl.records import (
    BASELINE_COLUMNS,
    FRONT_COLUMNS,
    METRICS,
    MODEL_METRICS,
    SERVING_COLUMNS,
    SERVING_METRICS,
)

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from automl.search.spec import StudySpec

FRONT_TRACE_UID = "pareto-front"
# fANOVA's forest fits noise on few trials: on 8 trials of a serving study it credited
# serving.instances with 0.87 of the accuracy, which no serving knob changes.
MIN_IMPORTANCE_TRIALS = 20
IMPORTANCE_TRIALS_PER_KNOB = 4
KNOBS_PER_ROW = 4  # the knob figure's panels side by side: wider ones' titles overlap
_KINDS = {  # kind → (trace name, marker style); the front first so that it is trace 0
    "front": ("Pareto front", {"color": "#d62728", "size": 11, "symbol": "diamond"}),
    "dominated": ("dominated", {"color": "#1f77b4", "size": 8, "opacity": 0.6}),
    "infeasible": ("infeasible", {"color": "#7f7f7f", "size": 8, "symbol": "x"}),
}
_UNITS = {c.key: c.unit for c in (*FRONT_COLUMNS, *BASELINE_COLUMNS, *SERVING_COLUMNS) if c.unit}
_MEASURED_ON = {
    "accuracy": "validation split, ONNX artifact",
    "accuracy_drop": "baseline − trial, validation split",
    "max_rate_rps": "highest Poisson rate within the p99 SLO",
    "serving_p99_ms": "from arrival, under load",
}
_HOVER_METRICS = (
    "test_accuracy",
    "latency_p50_ms",
    "latency_p99_ms",
    "throughput_sps",
    "size_mb",
    "macs",
)


@dataclass(frozen=True)
class Point:
    """A complete trial as the report plots it."""

    number: int
    kind: str  # front, dominated or infeasible
    metrics: dict[str, float]
    params: dict[str, object]
    violations: dict[str, float]
    baseline: bool = False  # the unmodified trained model, whatever its kind


def _hover(point: Point, spec: StudySpec) -> str:
    """Every objective, the main metrics, the knobs and the constraint margins of a point."""
    keys = dict.fromkeys([*spec.metric_names, *_HOVER_METRICS])
    lines = [f"{k} = {point.metrics[k]:.4g}" for k in keys if k in point.metrics]
    lines += [f"{k} = {knob_label(v)}" for k, v in point.params.items()]
    lines += [
        f"{c}: {'violated' if v > 0 else 'met'} ({v:+.3g})" for c, v in point.violations.items()
    ]
    title = f"<b>trial {point.number}</b> ({point.kind})"
    return "<br>".join([title, *(html.escape(line, quote=False) for line in lines)])


def front_axes(spec: StudySpec) -> tuple[str, str]:
    """The metrics the front is plotted on, ``(x, y)``: y is the study's quality objective
    (accuracy, or a trained model's accuracy drop), x its first other objective, a latency or
    load one first, and the per-sample latency where the study has no other."""
    objectives = spec.metric_names
    y = next((m for m in objectives if m in MODEL_METRICS), "accuracy")
    others = [m for m in objectives if m != y]
    timed = [m for m in others if m.startswith("latency") or m in SERVING_METRICS]
    return next(iter(timed + others), "latency_per_sample_ms"), y


def pareto_figure(points: list[Point], spec: StudySpec) -> go.Figure:
    """The front on the study's objectives (:func:`front_axes`), dominated and infeasible trials
    apart; a line joins the front where its two axes are the study's two objectives.

    The front trace has ``uid`` :data:`FRONT_TRACE_UID` and is always present (maybe empty),
    sorted by x; its ``customdata`` holds the trial numbers.
    """
    x_metric, y_metric = front_axes(spec)
    points = [p for p in points if x_metric in p.metrics and y_metric in p.metrics]
    joined = set(spec.metric_names) == {x_metric, y_metric}
    # The step's corner is the worse of two neighbours in x: the next one where x is minimised.
    step = "hv" if _direction(spec, x_metric) == "minimize" else "vh"
    fig = go.Figure()
    for kind, (name, marker) in _KINDS.items():
        group = sorted((p for p in points if p.kind == kind), key=lambda p: p.metrics[x_metric])
        line = joined and kind == "front"
        fig.add_trace(
            _scatter(
                group,
                spec,
                (x_metric, y_metric),
                name=f"{name} ({len(group)})",
                marker=marker,
                mode="lines+markers" if line else "markers",
                line={"shape": step, "color": marker["color"]} if line else None,
                uid=FRONT_TRACE_UID if kind == "front" else kind,
            )
        )
    baseline = [p for p in points if p.baseline]
    if baseline:  # a trained model's study: the point every speedup is measured against
        star = {"color": "#000000", "size": 16, "symbol": "star"}
        name = "baseline (the unmodified model)"
        axes = (x_metric, y_metric)
        fig.add_trace(_scatter(baseline, spec, axes, name=name, marker=star, uid="baseline"))
    fig.update_layout(
        title=_front_title(spec.metric_names, x_metric, y_metric),
        xaxis=_axis(spec, x_metric, [p.metrics[x_metric] for p in points]),
        yaxis=_axis(spec, y_metric, [p.metrics[y_metric] for p in points]),
        legend={"orientation": "h", "y": -0.18},
        height=520,
        margin={"t": 50, "b": 40},
    )
    return fig


def _front_title(objectives: list[str], x_metric: str, y_metric: str) -> str:
    plotted = f"{y_metric} against {x_metric}"
    if set(objectives) == {x_metric, y_metric}:
        return f"Pareto front: {plotted}"
    return f"Pareto front of {', '.join(objectives)}, seen as {plotted}"


def _scatter(
    points: list[Point], spec: StudySpec, axes: tuple[str, str], **style: object
) -> go.Scatter:
    """Points at ``axes`` (x, y) with hover text; their trial numbers as ``customdata``."""
    x_metric, y_metric = axes
    return go.Scatter(
        x=[p.metrics[x_metric] for p in points],
        y=[p.metrics[y_metric] for p in points],
        customdata=[p.number for p in points],
        hovertext=[_hover(p, spec) for p in points],
        hoverinfo="text",
        **{"mode": "markers", **style},
    )


def knob_figure(points: list[Point], spec: StudySpec) -> go.Figure:
    """Each knob's values against the front's two metrics (:func:`front_axes`): y above, x
    below, at most :data:`KNOBS_PER_ROW` knobs side by side; front trials in red."""
    x_metric, y_metric = front_axes(spec)
    knobs = sorted({k for p in points for k in p.params})
    if not knobs:
        return go.Figure(layout={"title": "No knobs were searched", "height": 200})
    bands = math.ceil(len(knobs) / KNOBS_PER_ROW)
    cols = math.ceil(len(knobs) / bands)
    cells = [knobs[band * cols : (band + 1) * cols] for band in range(bands)]
    height = 420 * bands
    fig = make_subplots(
        rows=2 * bands,
        cols=cols,
        shared_yaxes=True,
        horizontal_spacing=0.03,
        vertical_spacing=70 / height,
        specs=[[{} if c < len(row) else None for c in range(cols)] for row in cells for _ in "xy"],
        subplot_titles=[title for row in cells for title in [*row, *[""] * len(row)]],
    )
    for band, row_knobs in enumerate(cells):
        rows = {2 * band + 1: y_metric, 2 * band + 2: x_metric}
        for col, knob in enumerate(row_knobs, start=1):
            _add_knob(fig, points, knob, rows, col)
        for row, metric in rows.items():
            values = [p.metrics[metric] for p in points if metric in p.metrics]
            axis = _axis(spec, metric, values, brief=True)
            fig.update_yaxes({k: v for k, v in axis.items() if k != "title"}, row=row)
            fig.update_yaxes(title_text=axis["title"], row=row, col=1)
    fig.update_layout(height=height, margin={"t": 60, "b": 30})  # the mode bar above the titles
    return fig


def _add_knob(fig: go.Figure, points: list[Point], knob: str, rows: dict, col: int) -> None:
    """The trials that set ``knob``, in column ``col``: one panel per ``{row: metric}``."""
    having = [p for p in points if knob in p.params]
    labels = [knob_label(v) for v in sorted({p.params[knob] for p in having}, key=_order)]
    colors = [_KINDS[p.kind][1]["color"] for p in having]
    for row, metric in rows.items():
        fig.add_trace(
            go.Scatter(
                x=[knob_label(p.params[knob]) for p in having],
                y=[p.metrics.get(metric) for p in having],
                mode="markers",
                marker={"color": colors, "size": 7, "opacity": 0.7},
                hovertext=[f"trial {p.number} ({p.kind})" for p in having],
                hoverinfo="text+y",
                showlegend=False,
            ),
            row=row,
            col=col,
        )
        fig.update_xaxes(type="category", categoryarray=labels, row=row, col=col)


def _order(value: object) -> tuple[bool, float | str]:
    numeric = isinstance(value, int | float)
    return (not numeric, value if numeric else str(value))


def knob_label(value: object) -> str:
    """A knob's value for people: floats to 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _direction(spec: StudySpec, metric: str) -> str:
    """``metric``'s direction in the study, or its natural one where it is no objective."""
    return next((o.direction for o in spec.objectives if o.metric == metric), METRICS[metric])


def _axis(spec: StudySpec, metric: str, values: list[float], *, brief: bool = False) -> dict:
    """A plotly axis for ``metric``: a log one with :func:`log_ticks` where the metric is a
    positive quantity (a time, a rate, a size, a speedup), linear for accuracies."""
    log = metric not in MODEL_METRICS and bool(values) and min(values) > 0
    title = _axis_title(spec, metric, log, brief=brief)
    return {"title": title, "type": "log", **log_ticks(values)} if log else {"title": title}


def _axis_title(spec: StudySpec, metric: str, log: bool, *, brief: bool) -> str:
    """``metric (unit)`` where ``brief``; else also what it was measured on, its scale and
    which way is better: ``max_rate_rps (highest Poisson rate within the p99 SLO, req/s, log
    scale; higher is better)``."""
    unit = _UNITS.get(metric)
    if brief:
        return f"{metric} ({unit})" if unit else metric
    about = ", ".join(d for d in (_MEASURED_ON.get(metric), unit, "log scale" if log else "") if d)
    better = "higher" if _direction(spec, metric) == "maximize" else "lower"
    return f"{metric} ({about}; {better} is better)" if about else f"{metric} ({better} is better)"


def log_ticks(values: list[float]) -> dict[str, list]:
    """``tickvals`` and ``ticktext`` of a log axis over positive ``values``.

    Powers of ten where three lie within the values' range, else 1-2-5 steps, else 1-2-3-5-7
    steps where three do, all about evenly spaced on the log scale; else, over a range of
    about a factor of two at most, round numbers evenly spaced. Plotly's own ticks on a log
    axis whose range lies within a decade are one or none. Ticks just past the values are kept
    for the axis's padding (plotly draws none outside its range). The labels are plain numbers
    (:func:`tick_text`).
    """
    low, high = min(values), max(values)
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    for mantissas in ((1,), (1, 2, 5), (1, 2, 3, 5, 7)):
        ticks = [float(f"{m}e{e}") for e in decades for m in mantissas]
        if sum(low * (1 - 1e-9) <= t <= high * (1 + 1e-9) for t in ticks) >= 3:
            break
    else:
        ticks = _even_ticks(low, high)
    return {"tickvals": ticks, "ticktext": [tick_text(t) for t in ticks]}


def _even_ticks(low: float, high: float) -> list[float]:
    """Positive multiples of a round step (1, 2, 2.5 or 5 × 10ⁿ), three to six within [low,
    high], and one past each end; the value itself where ``low`` equals ``high``."""
    if high <= low:
        return [low]
    least = (high - low) / 6  # a step of at most twice this leaves three within the range
    power = 10.0 ** math.floor(math.log10(least))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= least)
    first, last = math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9)
    return [float(f"{k * step:.12g}") for k in range(max(first - 1, 1), last + 2)]


def tick_text(value: float) -> str:
    """A tick's label: ``1,000,000``, ``0.0002``, ``2.5``; never ``1e+6``, ``2e-04`` or ``200µ``."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return format(Decimal(f"{value:.4g}"), "f")


def importance_trials_needed(knobs: int) -> int:
    """The complete trials that parameter importances need in a study searching ``knobs``
    knobs: :data:`MIN_IMPORTANCE_TRIALS`, and :data:`IMPORTANCE_TRIALS_PER_KNOB` per knob."""
    return max(MIN_IMPORTANCE_TRIALS, IMPORTANCE_TRIALS_PER_KNOB * knobs)


def importance_figure(
    study: optuna.Study, spec: StudySpec, complete: list[FrozenTrial]
) -> go.Figure | str:
    """fANOVA importances of the knobs for each objective, or a note why there are none: fewer
    complete trials than :func:`importance_trials_needed`, or no objective that varied."""
    import optuna

    knobs = {k for t in complete for k, d in t.distributions.items() if not d.single()}
    needed = importance_trials_needed(len(knobs))
    if len(complete) < needed:
        return (
            f"Parameter importances need at least {needed} complete trials ({MIN_IMPORTANCE_TRIALS}"
            f", and {IMPORTANCE_TRIALS_PER_KNOB} per searched knob: {len(knobs)} here); this study"
            f" has {len(complete)}. On fewer, fANOVA's forest credits knobs with noise."
        )
    fig = go.Figure()
    skipped = []
    for i, metric in enumerate(spec.metric_names):
        try:
            importances = optuna.importance.get_param_importances(
                study,
                evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0),
                target=lambda t, i=i: t.values[i],
            )
        except RuntimeError:  # fANOVA: the objective never varied, so no knob explains it
            skipped.append(metric)
            continue
        names = sorted(importances)
        fig.add_trace(go.Bar(x=names, y=[importances[n] for n in names], name=metric))
    if len(skipped) == len(spec.metric_names):
        return f"No importances: no objective varied across the {len(complete)} complete trials."
    fig.update_layout(
        title=f"Parameter importance per objective (fANOVA over {len(complete)} complete trials, "
        "normalised)" + (f"; {', '.join(skipped)} never varied" if skipped else ""),
        barmode="group",
        yaxis={"title": "importance", "range": [0, 1]},
        height=380,
        margin={"t": 50, "b": 40},
    )
    return fig


def serving_figure(front: list, slo_p99_ms: float) -> go.Figure:
    """p99 against the offered rate, one line per front trial, with the SLO as a line.

    A run that did not keep up is an ``x``: its p99 counts each dropped request at the deadline.
    """
    fig, rates, p99s = go.Figure(), [], [slo_p99_ms]
    for record in front:
        runs = (record["user_attrs"].get("serving") or {}).get("runs") or []
        rates += [r["offered_rps"] for r in runs]
        p99s += [r["p99_bound_ms"] for r in runs]
        if not runs:
            continue
        fig.add_trace(
            go.Scatter(
                x=[r["offered_rps"] for r in runs],
                y=[r["p99_bound_ms"] for r in runs],
                mode="lines+markers",
                marker={"symbol": ["circle" if r["kept_up"] else "x" for r in runs], "size": 9},
                name=f"trial {record['number']}",
            )
        )
    if not rates:
        return fig
    fig.add_trace(  # a trace, not an hline: plotly places an hline's label by log10 on log axes
        go.Scatter(
            x=[min(rates), max(rates)],
            y=[slo_p99_ms] * 2,
            mode="lines",
            line={"dash": "dash", "color": "black"},
            name=f"SLO {slo_p99_ms:g} ms",
        )
    )
    fig.update_xaxes(type="log", title="offered rate (requests/s, Poisson)", **log_ticks(rates))
    fig.update_yaxes(type="log", title="p99 latency from arrival (ms)", **log_ticks(p99s))
    fig.update_layout(height=420, margin={"t": 30})
    return fig
