"""Rich renderings of targets, studies and fronts for the CLI."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from automl.records import front_columns

if TYPE_CHECKING:
    from automl.catalog import Method
    from automl.search.space import SearchSpace
    from automl.search.spec import StudySpec
    from automl.service.studies import StudyInfo
    from automl.targets import Target


def targets_table(rows: list[tuple[Target, bool]]) -> Table:
    """Targets with kind, providers, precisions and presence."""
    table = Table(title="Targets")
    for column in ("name", "kind", "present", "providers", "bits", "description"):
        table.add_column(column)
    for target, present in rows:
        table.add_row(
            target.name,
            target.kind,
            "[green]yes[/]" if present else "[dim]no[/]",
            ", ".join(target.execution_providers),
            ", ".join(str(b) for b in target.precisions),
            target.description,
        )
    return table


def methods_table(methods: list[Method], offered: dict[str, list[str]]) -> Table:
    """The catalog's quantization methods: bits, backends, the targets that run each, and
    what each does."""
    table = Table(title="Quantization methods")
    for column in ("name", "bits", "backends", "targets", "description"):
        table.add_column(column)
    for method in methods:
        table.add_row(
            method.name, str(method.bits), ", ".join(method.backends),
            ", ".join(offered[method.name]) or "[dim]none[/]", method.description,
        )  # fmt: skip
    return table


def spaces_table(spaces: list[SearchSpace]) -> Table:
    """Shipped search spaces, one line each: the name and the first clause of the description
    (``automl spaces --json`` gives all of it)."""
    table = Table(title="Search spaces (--space NAME, or a YAML path)")
    for column in ("name", "what it searches"):
        table.add_column(column, no_wrap=column == "name")
    for space in spaces:
        first = re.split(r"(?<=[;:])\s|(?<=\.)\s(?=[A-Z])", " ".join(space.description.split()))[0]
        table.add_row(space.name, first.rstrip(".;:"))
    return table


def studies_table(infos: list[StudyInfo]) -> Table:
    """One row per study."""
    table = Table(title="Studies")
    for column in ("name", "target", "space", "state", "complete", "failed", "running"):
        table.add_column(column)
    for info in infos:
        c = info.counts
        table.add_row(
            info.name,
            info.spec["target"],
            info.spec["search_space"],
            info.state,
            f"{c['COMPLETE']}/{info.n_trials or '∞'}",
            str(c["FAIL"]),
            str(c["RUNNING"]),
        )
    return table


def study_panel(info: StudyInfo) -> Panel:
    """Spec, progress and failures of one study."""
    spec = info.spec
    lines = [
        f"[bold]target[/] {spec['target']}   [bold]space[/] {spec['search_space']}   "
        f"[bold]dataset[/] {spec.get('dataset_name') or spec['dataset']}   "
        f"[bold]sampler[/] {spec['sampler']}",
        "[bold]objectives[/] "
        + ", ".join(f"{o['direction']} {o['metric']}" for o in spec["objectives"]),
        "[bold]constraints[/] "
        + (
            ", ".join(f"{c['metric']} {c['op']} {c['bound']:g}" for c in spec["constraints"])
            or "none"
        ),
        f"[bold]state[/] {info.state}   "
        + "   ".join(f"{k.lower()} {v}" for k, v in info.counts.items() if v),
    ]
    if spec.get("serving"):
        lines.insert(3, _scenario_line(spec["serving"]))
    if info.eta_s is not None:
        lines.append(f"[bold]ETA[/] {info.eta_s:.0f} s")
    if info.error:
        lines.append(f"[red]failed before any trial:[/] {escape(info.error)}")
    if info.converged:
        lines.append(f"[bold]ended[/] {escape(info.converged)}")
    for number in info.stale:
        lines.append(
            f"[yellow]trial {number}:[/] its worker sends no heartbeat (killed, or its host "
            "lost); the next worker or reaper to look fails and retries it"
        )
    for constraint, count in info.infeasible.items():
        lines.append(f"[yellow]infeasible:[/] {count} complete trial(s) break {constraint}")
    for failure in info.failures[-10:]:
        retry = failure.get("retried_as")
        retried = f" (retried as trial {retry})" if retry is not None else ""
        lines.append(f"[red]trial {failure['number']} failed:[/] {failure['reason']}{retried}")
    return Panel("\n".join(lines), title=info.name)


def _scenario_line(serving: dict) -> str:
    """A serving study's load: the offered rate (or the max rate searched), SLO and run length."""
    rate = serving["rate_rps"]
    offered = "the max rate" if rate == "max" else f"{float(rate):,.8g} requests/s"
    return (
        f"[bold]serving[/] {serving['arrival']} arrivals at {offered}   [bold]SLO[/] p99 "
        f"<= {serving['slo_p99_ms']:g} ms   [bold]load runs[/] {serving['duration_s']:g} s"
    )


def front_table(front: list[dict], spec: StudySpec) -> Table:
    """The Pareto front with the candidate knobs and every metric.

    A trained model's study shows its baseline too, marked, and each row's speedup and
    accuracy drop against it.
    """
    columns = front_columns(spec, brief=True)
    shown = sum(1 for t in front if t.get("on_front", True))
    table = Table(title=f"Pareto front of {spec.name} on {spec.target} ({shown} trials)")
    table.add_column("trial", justify="right", min_width=5)
    table.add_column("candidate", min_width=28)
    for column in columns:
        table.add_column(column.label, justify="right", no_wrap=True)
    for trial in front:
        cells = (column.text(trial["metrics"]) or "-" for column in columns)
        table.add_row(str(trial["number"]), _marked(trial), *cells)
    return table


def _marked(trial: dict) -> str:
    if not trial.get("baseline"):
        return describe(trial)
    where = "" if trial.get("on_front", True) else ", not on the front"
    return f"[bold]baseline[/] (unmodified{where}): {describe(trial)}"


def describe(record: dict) -> str:
    """Short human form of a trial's candidate (falls back to its params)."""
    candidate = record.get("user_attrs", {}).get("candidate")
    if candidate is None:
        return ", ".join(f"{k}={v}" for k, v in record["params"].items())
    from automl.candidate import method_of

    arch = candidate["arch"]
    precision = method_of(candidate)
    model = f"{arch['family']} w{arch['width']} d{arch['depth']} " if arch else ""
    level = candidate.get("graph_optimization", "all")
    graph = f" graph-opt {level}" if level != "all" else ""
    if serving := candidate.get("serving"):  # the dynamic batcher's settings
        graph += (
            f" serve ≤{serving['max_batch']} wait {serving['max_queue_delay_ms']:g} ms"
            f" ×{serving['instances']}"
        )
    return (
        f"{model}prune {candidate['pruning_ratio']:.1f} {precision} batch {candidate['batch_size']}"
        f"{graph}"
    )


def comparison_table(comparison: dict) -> Table:
    """Front candidates of two studies side by side, with what each front favours."""
    (first, first_target), (second, second_target) = comparison["studies"].items()
    table = Table(title=f"{first} ({first_target}) vs {second} ({second_target})")
    table.add_column("candidate")
    table.add_column("on the front of")
    for name in (first, second):
        table.add_column(f"val acc / ms per sample in {name} ({comparison['studies'][name]})")
    for row in comparison["candidates"]:
        cells = []
        for name in (first, second):
            metrics = row["metrics"][name]
            cells.append(
                "not run" if metrics is None
                else f"{metrics['accuracy']:.3f} / {metrics['latency_per_sample_ms']:.4g}"
            )  # fmt: skip
        wins = ", ".join(f"{name} ({comparison['studies'][name]})" for name in row["fronts"])
        table.add_row(describe(row), wins, *cells)
    for name, knobs in comparison["knobs"].items():
        favoured = "; ".join(
            f"{knob} " + ", ".join(f"{v}×{n}" for v, n in counts.items())
            for knob, counts in knobs.items()
            if counts
        )
        table.caption = (table.caption or "") + f"\n{name} front: {favoured}"
    return table


def remeasured_lines(number: int, latency: dict) -> list[str]:
    """What a re-measure of one front trial found, each figure labelled (see
    :func:`automl.trials.remeasure.remeasure_front`), and why its p99 moved when it moved by
    more than the new interval."""
    p99 = latency["intervals"]["latency_p99_ms"]
    low, high = p99["low_ms"], p99["high_ms"]
    interval = (
        f"95 % CI [{low:.4g}, {high:.4g}]"
        if low is not None and high is not None
        else ("too few runs for its 95 % CI")
    )
    lines = [
        f"trial {number}: p50 {latency['first_p50_ms']:.4g} ms in the study, "
        f"{latency['p50_ms']:.4g} ms re-measured; p99 {latency['first_p99_ms']:.4g} ms in the "
        f"study, {p99['value_ms']:.4g} ms re-measured ({interval}); cv {latency['cv']:.3f} "
        f"(coefficient of variation), {latency['runs']} runs"
    ]
    first = latency["first_p99_ms"]
    if low is not None and high is not None and not low <= first <= high:
        runs = latency.get("first_runs")
        lines.append(
            f"  the study's p99 lies outside that interval: it came from {runs or 'fewer'} runs, "
            "too few to pin a 99th percentile on a shared host, whose load moves the tail; "
            "budgets are decided on the re-measure"
        )
    return lines
