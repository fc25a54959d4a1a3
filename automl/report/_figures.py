"""Plotly figures of the study report: the Pareto front, the knobs, the importances, and the
front under load."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.subplots import make_subplots

if TYPE_CHECKING:
    import optuna

    from automl.search.spec import StudySpec

FRONT_TRACE_UID = "pareto-front"
MIN_IMPORTANCE_TRIALS = 8
_KINDS = {  # kind → (trace name, marker style); the front first so that it is trace 0
    "front": ("Pareto front", {"color": "#d62728", "size": 11, "symbol": "diamond"}),
    "dominated": ("dominated", {"color": "#1f77b4", "size": 8, "opacity": 0.6}),
    "infeasible": ("infeasible", {"color": "#7f7f7f", "size": 8, "symbol": "x"}),
}
# Plain numbers on log axes: plotly's default SI prefixes read "100µ" for 0.0001 ms. Their
# ticks are set at powers of ten only (dtick 1): the 2s and 5s between overlap in small panels.
_LOG_TICKS = "~g"
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


def pareto_figure(points: list[Point], spec: StudySpec, x_metric: str) -> go.Figure:
    """Accuracy against latency: the front as a line, dominated and infeasible trials apart.

    The front trace has ``uid`` :data:`FRONT_TRACE_UID` and is always present (maybe empty),
    sorted by ``x_metric``; its ``customdata`` holds the trial numbers.
    """
    fig = go.Figure()
    for kind, (name, marker) in _KINDS.items():
        group = sorted((p for p in points if p.kind == kind), key=lambda p: p.metrics[x_metric])
        front = kind == "front"
        fig.add_trace(
            _scatter(
                group,
                spec,
                x_metric,
                name=f"{name} ({len(group)})",
                marker=marker,
                mode="lines+markers" if front else "markers",
                line={"shape": "hv", "color": marker["color"]} if front else None,
                uid=FRONT_TRACE_UID if front else kind,
            )
        )
    baseline = [p for p in points if p.baseline]
    if baseline:  # a trained model's study: the point every speedup is measured against
        star = {"color": "#000000", "size": 16, "symbol": "star"}
        name = "baseline (the unmodified model)"
        fig.add_trace(_scatter(baseline, spec, x_metric, name=name, marker=star, uid="baseline"))
    fig.update_layout(
        title="Accuracy against latency",
        xaxis={"title": _log_title(x_metric), "type": "log", "tickformat": _LOG_TICKS, "dtick": 1},
        yaxis={"title": "accuracy (validation split, ONNX artifact)"},
        legend={"orientation": "h", "y": -0.18},
        height=520,
        margin={"t": 50, "b": 40},
    )
    return fig


def _scatter(points: list[Point], spec: StudySpec, x_metric: str, **style) -> go.Scatter:
    """Points at (``x_metric``, accuracy) with hover text; their trial numbers as ``customdata``."""
    return go.Scatter(
        x=[p.metrics[x_metric] for p in points],
        y=[p.metrics["accuracy"] for p in points],
        customdata=[p.number for p in points],
        hovertext=[_hover(p, spec) for p in points],
        hoverinfo="text",
        **{"mode": "markers", **style},
    )


def knob_figure(points: list[Point], x_metric: str) -> go.Figure:
    """One column per knob; accuracy above, latency below; front trials in red."""
    knobs = sorted({k for p in points for k in p.params})
    fig = make_subplots(
        rows=2,
        cols=max(len(knobs), 1),
        shared_yaxes=True,
        horizontal_spacing=0.02,
        vertical_spacing=0.12,
        subplot_titles=knobs,
    )
    colors = {kind: style["color"] for kind, (_, style) in _KINDS.items()}
    for col, knob in enumerate(knobs, start=1):
        having = [p for p in points if knob in p.params]
        for row, metric in ((1, "accuracy"), (2, x_metric)):
            fig.add_trace(
                go.Scatter(
                    x=[knob_label(p.params[knob]) for p in having],
                    y=[p.metrics[metric] for p in having],
                    mode="markers",
                    marker={"color": [colors[p.kind] for p in having], "size": 7, "opacity": 0.7},
                    hovertext=[f"trial {p.number} ({p.kind})" for p in having],
                    hoverinfo="text+y",
                    showlegend=False,
                ),
                row=row,
                col=col,
            )
        values = sorted({p.params[knob] for p in having}, key=_order)
        fig.update_xaxes(type="category", categoryarray=[knob_label(v) for v in values], col=col)
    fig.update_yaxes(title_text="accuracy (validation)", row=1, col=1)
    fig.update_yaxes(type="log", tickformat=_LOG_TICKS, dtick=1, row=2)
    fig.update_yaxes(title_text=_log_title(x_metric), row=2, col=1)
    fig.update_layout(height=520, margin={"t": 40, "b": 30})
    return fig


def _order(value: object) -> tuple[bool, float | str]:
    numeric = isinstance(value, int | float)
    return (not numeric, value if numeric else str(value))


def knob_label(value: object) -> str:
    """A knob's value for people: floats to 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _log_title(metric: str) -> str:
    """An axis title with the metric's unit, e.g. ``latency_p99_ms (ms, log scale)``."""
    unit = "ms" if metric.endswith("_ms") else metric.rsplit("_", 1)[-1]
    return f"{metric} ({unit}, log scale)"


def importance_figure(study: optuna.Study, spec: StudySpec, n_complete: int) -> go.Figure | str:
    """fANOVA importances of the knobs for each objective, or a note why there are none."""
    import optuna

    if n_complete < MIN_IMPORTANCE_TRIALS:
        return (
            f"Parameter importances need at least {MIN_IMPORTANCE_TRIALS} complete trials; "
            f"this study has {n_complete}."
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
        return f"No importances: no objective varied across the {n_complete} complete trials."
    fig.update_layout(
        title="Parameter importance per objective (fANOVA, normalised)"
        + (f"; {', '.join(skipped)} never varied" if skipped else ""),
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
    fig, rates = go.Figure(), []
    for record in front:
        runs = (record["user_attrs"].get("serving") or {}).get("runs") or []
        rates += [r["offered_rps"] for r in runs]
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
    if rates:  # a trace, not an hline: plotly places an hline's label by log10 on log axes
        fig.add_trace(
            go.Scatter(
                x=[min(rates), max(rates)],
                y=[slo_p99_ms] * 2,
                mode="lines",
                line={"dash": "dash", "color": "black"},
                name=f"SLO {slo_p99_ms:g} ms",
            )
        )
    fig.update_xaxes(
        type="log", title="offered rate (requests/s, Poisson)", tickformat=_LOG_TICKS, dtick=1
    )
    fig.update_yaxes(
        type="log", title="p99 latency from arrival (ms)", tickformat=_LOG_TICKS, dtick=1
    )
    fig.update_layout(height=420, margin={"t": 30})
    return fig
