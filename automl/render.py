"""Rich renderings of targets, studies and fronts for the CLI."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.panel import Panel
from rich.table import Table

if TYPE_CHECKING:
    from automl.spec import StudySpec
    from automl.studies import StudyInfo
    from automl.targets import Target

_FRONT_COLUMNS = (
    ("accuracy", "acc", "{:.3f}"),
    ("latency_per_sample_ms", "µs/sample", "{:.2f}"),
    ("latency_p50_ms", "p50 ms", "{:.3f}"),
    ("latency_p99_ms", "p99 ms", "{:.3f}"),
    ("throughput_sps", "samples/s", "{:,.0f}"),
    ("size_mb", "MB", "{:.4f}"),
    ("macs", "MACs", "{:,.0f}"),
)


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
        f"[bold]dataset[/] {spec['dataset']}   [bold]sampler[/] {spec['sampler']}",
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
    if info.eta_s is not None:
        lines.append(f"[bold]ETA[/] {info.eta_s:.0f} s")
    for failure in info.failures[-10:]:
        lines.append(f"[red]trial {failure['number']} failed:[/] {failure['reason']}")
    return Panel("\n".join(lines), title=info.name)


def front_table(front: list[dict], spec: StudySpec) -> Table:
    """The Pareto front with the candidate knobs and every metric."""
    table = Table(title=f"Pareto front of {spec.name} on {spec.target} ({len(front)} trials)")
    table.add_column("trial", justify="right")
    table.add_column("candidate")
    for _, header, _ in _FRONT_COLUMNS:
        table.add_column(header, justify="right", no_wrap=True)
    for trial in front:
        metrics = trial["metrics"]
        table.add_row(
            str(trial["number"]),
            describe_params(trial["params"]),
            *(_cell(metrics, key, fmt) for key, _, fmt in _FRONT_COLUMNS),
        )
    return table


def _cell(metrics: dict, key: str, fmt: str) -> str:
    if key not in metrics:
        return "-"
    scale = 1000.0 if key == "latency_per_sample_ms" else 1.0
    return fmt.format(metrics[key] * scale)


def describe_params(params: dict) -> str:
    """Short human form of a candidate's params."""
    family = params.get("arch.family", "")
    parts = [f"{family} w{params.get('arch.width', '?')} d{params.get('arch.depth', '?')}"]
    if "pruning_ratio" in params:
        parts.append(f"prune {params['pruning_ratio']:.1f}")
    bits = params.get("bits")
    if bits is not None:
        parts.append(
            f"int8-{params['int8_mode']}" if bits == 8 and "int8_mode" in params else f"{bits}b"
        )
    if "batch_size" in params:
        parts.append(f"batch {params['batch_size']}")
    return " ".join(parts)
