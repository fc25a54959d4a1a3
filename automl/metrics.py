"""The metric registry: every metric a trial records or a view shows is one :class:`Metric`.

An entry says what the metric is (its name, natural direction and where it comes from), how
every view shows it (column label, number format, unit) and, for a latency metric, which
quantile of the per-batch run times it is: the trial records it from its timed runs, and a
constraint on it becomes a latency budget. :func:`register` is all a new metric takes: the
trial records it, a spec accepts it, and the CLI's tables, the report and the API show it.

A leaf: it imports nothing of ours. Readers see the registry through live views
(:class:`Names`, :class:`Directions`), so an entry registered later is in them too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Set
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Direction = Literal["maximize", "minimize"]
# Where a metric comes from: the task's score of the artifact's outputs, the graph itself, the
# trial's timed runs, a load run, or the views (derived from other metrics, never recorded).
Source = Literal["task", "model", "latency", "load", "derived"]
# A latency metric's quantile of per-batch times, in its units: ms per batch, ms per sample,
# or samples per second.
Per = Literal["batch", "sample", "rate"]
# Where its column shows: every view, the terminal's table included ("table"); the report and
# the API only ("report"); none (None).
Shown = Literal["table", "report"] | None


@dataclass(frozen=True)
class Metric:
    """One metric, as the trial records it, a spec searches it and every view shows it.

    Attributes:
        name: Its key in a trial's record, in specs and in views.
        direction: Its natural direction as an objective; None for one that is reported and
            never searched (neither an objective nor a constraint).
        source: Where it comes from (see :data:`Source`).
        label: Its column's heading.
        fmt: Its number format, e.g. ``"{:.4f}"``.
        unit: Its unit, where it has one (``"ms"``, ``"MB"``, ``"×"``).
        shown: Where its column shows (see :data:`Shown`).
        baseline: Measured against the trained model's baseline: only a study of a trained
            model (``model:``) has it.
        quantile: A latency metric's quantile of per-batch run times: the trial records it
            from its runs, and a bound on it is a latency budget.
        per: What that quantile is in the metric's units (see :data:`Per`).
    """

    name: str
    direction: Direction | None
    source: Source
    label: str
    fmt: str = "{:.4g}"
    unit: str = ""
    shown: Shown = "table"
    baseline: bool = False
    quantile: float | None = None
    per: Per = "batch"

    def __post_init__(self) -> None:
        if self.quantile is not None and not (self.source == "latency" and 0 < self.quantile < 1):
            raise ValueError(
                f"metric {self.name!r}: a quantile is a latency metric's, in (0, 1); got "
                f"{self.quantile} on a {self.source} metric"
            )

    @property
    def quantile_label(self) -> str:
        """The quantile as a budget decision names it: ``p99``, ``per-sample p50``."""
        p = f"p{100 * (self.quantile or 0.5):g}"
        return {"batch": p, "sample": f"per-sample {p}", "rate": f"throughput at {p}"}[self.per]

    def in_units(self, batch_ms: float, batch_size: int) -> float:
        """A per-batch time in milliseconds, in this metric's units."""
        if self.per == "rate":
            return batch_size * 1000.0 / batch_ms if batch_ms > 0 else math.inf
        return batch_ms / batch_size if self.per == "sample" else batch_ms

    def budget_ms(self, op: str, bound: float, batch_size: int) -> float | None:
        """The per-batch time (ms) at :attr:`quantile` that ``name op bound`` allows at most;
        None where it bounds no time from above (a lower bound on a time, or no quantile)."""
        if self.quantile is None:
            return None
        if self.per == "rate":  # samples per second: a lower bound on it caps the time
            return 1000.0 * batch_size / bound if op == ">=" and bound > 0 else None
        if op != "<=":
            return None
        return bound * batch_size if self.per == "sample" else bound


_METRICS: dict[str, Metric] = {}
REGISTRY: Mapping[str, Metric] = MappingProxyType(_METRICS)


def register(metric: Metric) -> Metric:
    """Add ``metric`` to the registry; views show it after those registered before it.

    Raises:
        ValueError: A metric of that name is registered already.
    """
    if metric.name in _METRICS:
        raise ValueError(f"metric {metric.name!r} is registered already")
    _METRICS[metric.name] = metric
    return metric


def latency_quantile(quantile: float, shown: Shown = "table") -> Metric:
    """The entry of a quantile of per-batch run times, e.g. ``latency_p95_ms`` for 0.95."""
    p = f"p{100 * quantile:g}"
    name = f"latency_{p.replace('.', '_')}_ms"
    return Metric(name, "minimize", "latency", f"{p} ms", unit="ms", shown=shown, quantile=quantile)


class Names(Set[str]):
    """The names of the registered metrics that ``keep`` selects, in registry order, read
    from the registry at each use."""

    def __init__(self, keep: Callable[[Metric], bool]) -> None:
        self._keep = keep

    def __contains__(self, name: object) -> bool:
        metric = _METRICS.get(name) if isinstance(name, str) else None
        return metric is not None and self._keep(metric)

    def __iter__(self) -> Iterator[str]:
        return iter([m.name for m in _METRICS.values() if self._keep(m)])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return repr(list(self))


class Directions(Mapping[str, Direction]):
    """Searchable metrics (those with a direction) that ``keep`` selects → their natural
    direction, read from the registry at each use."""

    def __init__(self, keep: Callable[[Metric], bool] = lambda m: True) -> None:
        self._names = Names(lambda m: m.direction is not None and keep(m))

    def __getitem__(self, name: str) -> Direction:
        if name not in self._names:
            raise KeyError(name)
        return _METRICS[name].direction

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return repr(dict(self))


# The entries, in the order every view shows their columns. Against the baseline (a trained
# model's study) first: ``speedup`` is the baseline's per-sample latency at its own serving batch
# over the trial's (what a switch from today's deployment gains), ``speedup_same_batch`` both at
# the trial's batch (what the model's changes alone gain).
for _metric in (
    Metric("speedup", "maximize", "latency", "speedup with batching", "{:.2f}×", "×",
           baseline=True),
    Metric("speedup_same_batch", "maximize", "latency", "speedup at same batch", "{:.2f}×", "×",
           baseline=True),
    Metric("accuracy_drop", "minimize", "task", "acc drop", "{:+.4f}", baseline=True),
    Metric("size_ratio", "minimize", "model", "size ratio", "{:.3f}", shown="report",
           baseline=True),
    Metric("accuracy", "maximize", "task", "val acc", "{:.4f}"),
    # The held-out test split's accuracy: reported, never searched (the search sees accuracy).
    Metric("test_accuracy", None, "task", "test acc", "{:.4f}"),
    Metric("accuracy_gap", None, "derived", "val − test", "{:+.4f}", shown="report"),
    # Under load (``serving:``): the highest Poisson rate whose p99 meets the SLO, and the p99
    # from arrival to result at the scenario's rate (at that max rate where it is ``max``).
    Metric("max_rate_rps", "maximize", "load", "max req/s", "{:,.0f}", "req/s"),
    Metric("serving_p99_ms", "minimize", "load", "p99 served ms", "{:.4g}", "ms"),
    Metric("latency_per_sample_ms", "minimize", "latency", "ms/sample", unit="ms",
           quantile=0.5, per="sample"),
    latency_quantile(0.5),
    latency_quantile(0.9, shown=None),
    latency_quantile(0.95, shown="report"),
    latency_quantile(0.99),
    Metric("throughput_sps", "maximize", "latency", "samples/s", "{:,.0f}", "samples/s",
           quantile=0.5, per="rate"),
    Metric("size_mb", "minimize", "model", "MB", "{:.4f}", "MB"),
    # A quantized trial's own fp32 graph's per-sample latency over its own: never searched.
    Metric("quantization_gain", None, "latency", "gain over fp32", "{:.2f}×", "×",
           shown="report"),
    Metric("params", "minimize", "model", "params", "{:,.0f}", shown=None),
    Metric("macs", "minimize", "model", "MACs", "{:,.0f}"),
):  # fmt: skip
    register(_metric)
