"""A trial's deployment: where and how its graph runs, resolved once at the trial's start.

The target, the runtime (the candidate's ``runtime`` knob, or the target's first runtime that
runs the method), the method, the serving batch, the threads and ONNX Runtime's graph
optimisation level. The trial records it (``history.deployment``), and the re-measure, the
latency confirmation and the exports read it back, so no reader guesses a runtime from other
attrs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from automl.targets import require_present

if TYPE_CHECKING:
    from collections.abc import Mapping

    from automl.candidate import Candidate
    from automl.targets import Target


@dataclass(frozen=True)
class Deployment:
    """Where a trial's graph runs.

    Attributes:
        target: The target, narrowed to :attr:`runtime` when the candidate names one (see
            :meth:`automl.targets.Target.on_runtime`): every stage that opens a session on it
            opens it on that runtime.
        runtime: The runtime's name.
        method: The quantization method asked for.
        batch_size: The serving batch.
        threads: Intra-op threads.
        optimization: ONNX Runtime's graph optimisation level.
    """

    target: Target
    runtime: str
    method: str
    batch_size: int
    threads: int
    optimization: str

    @classmethod
    def resolve(cls, target: Target, candidate: Candidate, *, check: bool = True) -> Deployment:
        """The deployment of ``candidate`` on ``target``; with ``check``, its runtime must be
        able to start here (asked once, of the runtime).

        Raises:
            SpecError: The target does not offer the runtime, or the runtime does not run the
                method.
            TargetUnavailable: The runtime, or the target's hardware, is not here.
        """
        deployed = target.on_runtime(candidate.runtime)
        method = candidate.quant_method.name
        if check:
            require_present(deployed, [method])
        return cls(
            target=deployed, runtime=deployed.backend_for(method).name, method=method,
            batch_size=candidate.batch_size, threads=deployed.intra_op_threads,
            optimization=candidate.graph_optimization,
        )  # fmt: skip

    @classmethod
    def of_record(cls, target: Target, attrs: Mapping[str, Any]) -> Deployment:
        """The deployment a trial recorded (its user attrs), on ``target``; a trial recorded
        before deployments were is read from its candidate and latency record."""
        recorded = (attrs.get("history") or {}).get("deployment")
        candidate = attrs.get("candidate") or {}
        if recorded is None:
            recorded = {
                "runtime": candidate.get("runtime"),
                "method": (attrs.get("latency") or {}).get("method", "fp32"),
                "batch_size": candidate.get("batch_size", 1),
                "optimization": candidate.get("graph_optimization", "all"),
            }
        deployed = target.on_runtime(recorded.get("runtime"))
        return cls(
            target=deployed, runtime=deployed.backend_for(recorded["method"]).name,
            method=recorded["method"], batch_size=recorded["batch_size"],
            threads=recorded.get("threads", deployed.intra_op_threads),
            optimization=recorded.get("optimization", "all"),
        )  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        """The record: the target's name and the rest as they are."""
        return {
            "target": self.target.name, "runtime": self.runtime, "method": self.method,
            "batch_size": self.batch_size, "threads": self.threads,
            "optimization": self.optimization,
        }  # fmt: skip
