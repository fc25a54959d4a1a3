"""Rich renderings of targets, studies and fronts for the CLI."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from automl.candidate import describe as describe_candidate
from automl.records import built_of, column_of, front_columns
from automl.report.fitted import FitColumn, FittedTable

if TYPE_CHECKING:
    from collections.abc import Mapping

    from automl.catalog import Method
    from automl.search.space import SearchSpace
    from automl.search.spec import StudySpec
    from automl.service.studies import StudyInfo
    from automl.targets import Target


def targets_table(
    rows: list[tuple[Target, bool]], refusals: Mapping[str, str | None]
) -> FittedTable:
    """Targets with kind, presence, runtimes (each marked absent where ``refusals`` gives it a
    reason), precisions; a narrow terminal drops the description, then the bits, and wraps the
    runtimes one name a line."""

    def runtimes(target: Target) -> str:
        return ", ".join(f"{r} [dim](absent)[/]" if refusals.get(r) else r for r in target.backends)

    return FittedTable(
        "Targets",
        [
            FitColumn("name", [t.name for t, _ in rows]),
            FitColumn("kind", [t.kind for t, _ in rows]),
            FitColumn("present", ["[green]yes[/]" if p else "[dim]no[/]" for _, p in rows]),
            FitColumn("runtimes", [runtimes(t) for t, _ in rows]),
            FitColumn("bits", [", ".join(map(str, t.precisions)) for t, _ in rows], drop=2),
            FitColumn("description", [t.description for t, _ in rows], drop=3),
        ],
    )


def methods_table(methods: list[Method], offered: dict[str, list[str]]) -> FittedTable:
    """The catalog's quantization methods: bits, backends, the targets that run each, and the
    first sentence of what each does (``automl methods --json`` gives all of it)."""
    every = {name for names in offered.values() for name in names}
    return FittedTable(
        "Quantization methods (automl methods --json describes each in full)",
        [
            FitColumn("name", [m.name for m in methods]),
            FitColumn("bits", [str(m.bits) for m in methods], numeric=True),
            FitColumn("backends", [", ".join(m.backends) for m in methods], drop=2),
            FitColumn("targets", [_targets_text(offered[m.name], every) for m in methods]),
            FitColumn("what it does", [escape(_first_sentence(m.description)) for m in methods],
                      drop=1),
        ],
    )  # fmt: skip


def _targets_text(names: list[str], every: set[str]) -> str:
    if not names:
        return "[dim]none[/]"
    return "every target" if set(names) == every else ", ".join(names)


def _first_sentence(text: str) -> str:
    return re.split(r"(?<=[.;:])\s", " ".join(text.split()))[0].rstrip(".;:")


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


# The columns a narrow terminal drops first, in this order; the study's objectives go last.
_DROPPED_FIRST = (
    "throughput_sps", "size_mb", "macs", "latency_p50_ms", "test_accuracy", "latency_p99_ms",
    "serving_p99_ms", "accuracy",
)  # fmt: skip


def front_table(front: list[dict], spec: StudySpec) -> FittedTable:
    """The Pareto front with the candidate knobs and every metric, fitted to the terminal.

    A trained model's study shows its baseline too, marked, and each row's speedup and
    accuracy drop against it. The trial and candidate columns are whole at any width; a
    narrow terminal drops the other columns, samples/s, MB and MACs first and the study's
    objectives last (``--json`` has them all).
    """
    columns = front_columns(spec, brief=True)
    objectives = [o.metric for o in spec.objectives]
    shown = sum(1 for t in front if t.get("on_front", True))
    fitted = [
        FitColumn("trial", [str(t["number"]) for t in front], numeric=True),
        FitColumn("candidate", [_marked(t) for t in front]),
        *(
            FitColumn(
                c.label, [c.text(t["metrics"]) or "-" for t in front], numeric=True,
                drop=_drop_rank(c.key, objectives, [c.key for c in columns]),
            )
            for c in columns
        ),
    ]  # fmt: skip
    notes = [_speedup_note(front)] if spec.model is not None else []
    if any(t.get("ties") for t in front):
        notes.append(_TIES_NOTE)
    title = f"Pareto front of {spec.name} on {spec.target} ({shown} trials)"
    return FittedTable(title, fitted, notes)


def _speedup_note(front: list[dict]) -> str:
    """What the two speedups compare, with the baseline's batch where its row is there."""
    batches = {
        (t.get("user_attrs", {}).get("candidate") or {}).get("batch_size")
        for t in front
        if t.get("baseline")
    }
    batch = f"batch {batches.pop()}" if len(batches) == 1 and None not in batches else "its batch"
    return (
        f"speedup with batching: the baseline at {batch} against the row at its own batch; "
        "speedup at same batch: the model's own, both at the row's batch"
    )


_TIES_NOTE = (
    "ties N: trial N, on Optuna's front, is worse than this row but for a latency within "
    "measurement noise of it, so it is left out (docs/latency.md)"
)


def _drop_rank(key: str, objectives: list[str], keys: list[str]) -> int:
    """When a narrow table drops the column of ``key``: the highest rank goes first."""
    if key in objectives:
        return 1 + objectives[::-1].index(key)
    if key in _DROPPED_FIRST:
        return 100 + len(_DROPPED_FIRST) - _DROPPED_FIRST.index(key)
    return 10 + keys.index(key)


def _marked(trial: dict) -> str:
    label = escape(describe(trial))
    if ties := trial.get("ties"):
        label += f" [dim](ties {', '.join(map(str, ties))})[/]"
    if not trial.get("baseline"):
        return label
    where = "" if trial.get("on_front", True) else ", not on the front"
    return f"[bold]baseline[/] (unmodified{where}): {label}"


def describe(record: dict) -> str:
    """Short human form of a trial's candidate, as built (see
    :func:`automl.candidate.describe`); a record without a candidate shows its params."""
    if label := record.get("label"):
        return label
    candidate = record.get("user_attrs", {}).get("candidate")
    if candidate is None:
        return ", ".join(f"{k}={v}" for k, v in record["params"].items())
    return describe_candidate(candidate, built_of(record["user_attrs"]))


def comparison_table(comparison: dict) -> Table:
    """Front candidates of two studies side by side, with what each front favours."""
    (first, first_target), (second, second_target) = comparison["studies"].items()
    table = Table(title=f"{first} ({first_target}) vs {second} ({second_target})")
    table.add_column("candidate")
    table.add_column("on the front of")
    shown = (column_of("accuracy"), column_of("latency_per_sample_ms"))
    for name in (first, second):
        heading = " / ".join(c.label for c in shown)
        table.add_column(f"{heading} in {name} ({comparison['studies'][name]})")
    for row in comparison["candidates"]:
        cells = []
        for name in (first, second):
            metrics = row["metrics"][name]
            cells.append(
                "not run" if metrics is None else " / ".join(c.text(metrics) or "-" for c in shown)
            )
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
    :func:`automl.fleet.remeasure.remeasure_front`), and why its p99 moved when it moved by
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
