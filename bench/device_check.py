"""The device check: one verdict per GPU claim automl relies on, for a lent H100 or H200.

Run, from the repository root: ``python -m bench.device_check --out device_check.json``.

It needs only torch and numpy to start; the claims that use automl's own code need its
dependencies too (``pip install -e .``), and the ONNX Runtime and TensorRT claims need
``make install-gpu``. It prints one line per claim, ``[HOLDS]``, ``[FAILS]`` or ``[UNKNOWN]``
with the evidence, and rewrites the JSON after each, so a run stopped early keeps what it
found. It stops starting sections when ``--budget-s`` (420 s) would be overrun; a skipped
claim is UNKNOWN. Exit status: 0 every claim holds, 1 one fails, 2 none fails but some are
unknown. See ``docs/gpu.md``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import _device_torch as dt

LISTING = ("nvidia_gpu_listed", "driver_runs_cuda_13", "whole_gpu_not_mig")
IDENTITY = ("cuda_names_match_nvidia_smi", "cuda_order_matches_nvidia_smi",
            "pinning_by_uuid_selects_that_gpu", "one_target_accepts_each_gpu")  # fmt: skip
WORKLOADS = ("mlp_b64", "gemm_4096")
TIMING = (*(f"warm_up_settles[{w}]" for w in WORKLOADS), "cuda_graph_removes_launch_overhead",
          "tf32_off_is_ieee_fp32", "tf32_changes_fp32_matmul", "fp8_beats_fp16_at_8192",
          "int8_beats_fp16_at_8192", "precision_shows_at_digits_size")  # fmt: skip
RUNTIME = ("cuda_provider_starts", "tensorrt_provider_starts",
           "cuda_graph_reported_by_the_session", "runtime_versions_from_loaded_libraries")  # fmt: skip
SETTLED = 1.05  # p50 after warm-up within 5 % of p50 after 2 s of load
BIG, DIGITS = (8192, 8192, 8192), (64, 64, 16)


class Verdicts:
    """The claims judged so far and the measurements behind them, written after each."""

    def __init__(self, out: Path, budget_s: float) -> None:
        self.out, self.deadline = out, time.monotonic() + budget_s
        self.data: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                     "verdicts": [], "measurements": {}}  # fmt: skip

    def say(self, claim: str, holds: bool | None, evidence: str) -> None:
        """Record one claim: True HOLDS, False FAILS, None UNKNOWN."""
        word = {True: "HOLDS", False: "FAILS", None: "UNKNOWN"}[holds]
        self.data["verdicts"].append({"claim": claim, "verdict": word, "evidence": evidence})
        print(f"[{word}] {claim}: {evidence}", flush=True)
        self.save()

    def unknown(self, claims: tuple[str, ...], why: str) -> None:
        """Every one of ``claims`` is UNKNOWN, for one reason."""
        for claim in claims:
            self.say(claim, None, why)

    def measure(self, name: str, fn: Any, need_s: float) -> Any:
        """``fn()``, kept under ``name``; None where the budget is short or it raised."""
        left = self.deadline - time.monotonic()
        if left < need_s:
            self.data["measurements"][name] = {"skipped": f"{left:.0f} s of budget left"}
            return None
        try:
            result = fn()
        except Exception as e:  # a broken measurement is a finding: keep it, go on
            result, self.data["measurements"][name] = None, {"error": f"{type(e).__name__}: {e}"}
        else:
            self.data["measurements"][name] = result
        self.save()
        return result

    def exit_status(self) -> int:
        words = {v["verdict"] for v in self.data["verdicts"]}
        return 1 if "FAILS" in words else 2 if "UNKNOWN" in words else 0

    def save(self) -> None:
        self.out.write_text(json.dumps(self.data, indent=1, default=str) + "\n")


def nvidia_smi_gpus() -> list[dict[str, str]] | None:
    """GPUs as ``nvidia-smi`` lists them, in its index order; None without ``nvidia-smi``."""
    if shutil.which("nvidia-smi") is None:
        return None
    fields = ("index", "uuid", "name", "driver_version", "mig.mode.current", "pci.bus_id")
    done = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    rows = [[f.strip() for f in line.split(",")] for line in done.stdout.splitlines()]
    return [dict(zip(fields, row, strict=True)) for row in rows if len(row) == len(fields)]


def judge_listing(v: Verdicts, gpus: list[dict[str, str]] | None) -> None:
    """Is there a GPU, a driver for CUDA 13 (580 or newer), and no MIG slicing?"""
    if not gpus:
        why = "nvidia-smi is missing" if gpus is None else "nvidia-smi lists no GPU"
        v.unknown(LISTING, f"{why}: no NVIDIA GPU here")
        return
    names = ", ".join(g["name"] for g in gpus)
    v.say("nvidia_gpu_listed", True, f"{len(gpus)}: {names}")
    drivers = sorted({g["driver_version"] for g in gpus})
    major = min((int(d.split(".")[0]) for d in drivers if d.split(".")[0].isdigit()), default=0)
    v.say("driver_runs_cuda_13", major >= 580, f"driver {', '.join(drivers)}; CUDA 13 needs 580+")
    mig = [g["index"] for g in gpus if g["mig.mode.current"].lower() == "enabled"]
    v.say("whole_gpu_not_mig", not mig, f"MIG enabled on GPUs {mig}" if mig else "MIG off")


def judge_identity(
    v: Verdicts,
    gpus: list[dict[str, str]],
    cuda: dict[str, Any],
    pinned: dict[str, dict[str, Any]],
    accepted: dict[str, list[str]] | None,
) -> None:
    """CUDA's view of the GPUs against ``nvidia-smi``'s, pinning by UUID, and the targets.

    Args:
        gpus: ``nvidia-smi``'s GPUs.
        cuda: The CUDA driver's devices with nothing pinned (:func:`_device_torch.cuda_devices`).
        pinned: The CUDA driver's devices with ``CUDA_VISIBLE_DEVICES`` set to each UUID.
        accepted: The targets that accept each GPU name; None where automl cannot be imported.
    """
    devices = cuda.get("devices")
    if not devices:
        v.unknown(IDENTITY, f"the CUDA driver answers no devices: {cuda.get('error', cuda)}")
        return
    by_uuid = {d["uuid"]: d["name"] for d in devices}
    named = [(g["uuid"], g["name"], by_uuid.get(g["uuid"])) for g in gpus]
    differ = [f"{u}: nvidia-smi {s!r}, CUDA {c!r}" for u, s, c in named if s != c]
    v.say("cuda_names_match_nvidia_smi", not differ, "; ".join(differ) or "same names by UUID")
    order, smi = [d["uuid"] for d in devices], [g["uuid"] for g in gpus]
    v.say("cuda_order_matches_nvidia_smi", order == smi, f"CUDA {order}, nvidia-smi {smi}")
    wrong = {u: [d["uuid"] for d in seen.get("devices", [])] for u, seen in pinned.items()}
    wrong = {u: seen for u, seen in wrong.items() if seen != [u]}
    v.say("pinning_by_uuid_selects_that_gpu", bool(pinned) and not wrong,
          f"pinned {len(pinned)} GPUs; wrong: {wrong}" if wrong else f"pinned {list(pinned)}")  # fmt: skip
    if accepted is None:
        v.say("one_target_accepts_each_gpu", None, "automl's targets cannot be imported here")
    else:
        odd = {name: targets for name, targets in accepted.items() if len(targets) != 1}
        v.say("one_target_accepts_each_gpu", not odd, json.dumps(accepted))


def judge_timing(v: Verdicts, m: dict[str, Any]) -> None:
    """The torch measurements (:mod:`bench._device_torch`) against each timing claim."""
    for w in WORKLOADS:
        ours = m.get(f"warm_up[{w}]")
        if not ours:
            v.say(f"warm_up_settles[{w}]", None, "not measured (see measurements)")
            continue
        ratio = ours["p50_after_warm_up_ms"] / ours["p50_after_2s_load_ms"]
        fixed = m.get(f"warm_up_10_runs[{w}]") or {}
        old = fixed and fixed["p50_after_warm_up_ms"] / fixed["p50_after_2s_load_ms"]
        v.say(f"warm_up_settles[{w}]", ratio <= SETTLED,
              f"p50 after automl's warm-up / after 2 s of load = {ratio:.3f} "
              f"({ours['warm_up_s']} s of warm-up); after 10 runs only: {old or '?':.4}")  # fmt: skip
    split = m.get("timing_split[mlp_b64]")
    v.say("cuda_graph_removes_launch_overhead",
          None if not split else split["cuda_graph_p50_ms"] < 0.8 * split["host_timed_p50_ms"],
          json.dumps(split) if split else "not measured")  # fmt: skip
    tf32 = m.get("tf32")
    if tf32:
        off, on = tf32["off"]["max_rel_error"], tf32["on"]["max_rel_error"]
        v.say("tf32_off_is_ieee_fp32", off < 1e-5, f"relative error with TF32 off: {off:.2e}")
        v.say("tf32_changes_fp32_matmul", on > 10 * off, json.dumps(tf32))
    else:
        v.unknown(("tf32_off_is_ieee_fp32", "tf32_changes_fp32_matmul"), "not measured")
    big, small = m.get("matmul[8192]") or {}, m.get("matmul[digits]") or {}
    for kind in ("fp8", "int8"):
        beats = _faster(big, kind, 0.75)
        v.say(f"{kind}_beats_fp16_at_8192", beats, f"8192³ p50 ms: {json.dumps(big)}")
    shows = [_faster(small, kind, 0.8) for kind in ("fp8", "int8")]
    known = [s for s in shows if s is not None]
    v.say("precision_shows_at_digits_size", any(known) if known else None,
          f"64×64×16 p50 ms: {json.dumps(small)}; where no kind is 20 % faster, latency "
          "cannot tell which precision ran")  # fmt: skip


def _faster(times: dict[str, Any], kind: str, share: float) -> bool | None:
    """Whether ``kind`` took under ``share`` of fp16's time; None where either did not run."""
    ours, fp16 = times.get(kind), times.get("fp16")
    if not isinstance(ours, float) or not isinstance(fp16, float):
        return None
    return ours < share * fp16


def measure_identity(v: Verdicts, gpus: list[dict[str, str]]) -> None:
    """Ask the CUDA driver with nothing pinned, then pinned to each GPU's UUID (four at most)."""
    cuda = v.measure("cuda_devices", dt.cuda_devices, 10) or {}
    pinned = {}
    for g in gpus[:4]:
        seen = v.measure(f"cuda_devices[{g['uuid']}]", lambda g=g: dt.cuda_devices(g["uuid"]), 10)
        pinned[g["uuid"]] = seen or {}
    judge_identity(v, gpus, cuda, pinned, v.measure("targets", _accepted_targets(gpus), 5))


def _accepted_targets(gpus: list[dict[str, str]]) -> Any:
    def accepted() -> dict[str, list[str]]:
        from automl.targets import list_targets
        from automl.targets.presence import device_refusal

        cuda = [t for t in list_targets() if t.kind == "cuda"]
        return {g["name"]: [t.name for t in cuda if device_refusal(t, g["name"]) is None]
                for g in gpus}  # fmt: skip

    return accepted


def measure_timing(v: Verdicts) -> dict[str, Any]:
    """The torch measurements of :mod:`bench._device_torch`, each within the budget."""
    try:
        from automl.pipeline.gpu_warmup import warm_up_by_time
    except ImportError as e:  # automl's dependencies are not installed: its warm-up is unknown
        v.data["measurements"]["warm_up"] = {"error": f"automl cannot be imported: {e}"}
        warm_up_by_time = None
    m: dict[str, Any] = {}
    fns = dt.workloads()

    def keep(name: str, fn: Any, need_s: float) -> None:
        m[name] = v.measure(name, fn, need_s)

    for w, fn in fns.items():
        if warm_up_by_time is not None:
            keep(f"warm_up[{w}]", lambda fn=fn: dt.warm_up_adequacy(fn, warm_up_by_time), 20)
        ten_runs = lambda fn=fn: dt.warm_up_adequacy(fn, lambda t: [t() for _ in range(10)])  # noqa: E731
        keep(f"warm_up_10_runs[{w}]", ten_runs, 15)
    keep("timing_split[mlp_b64]", lambda: dt.timing_split(fns["mlp_b64"]), 10)
    keep("tf32", dt.tf32_effect, 10)
    keep("matmul[8192]", lambda: dt.matmul_times(BIG), 15)
    keep("matmul[digits]", lambda: dt.matmul_times(DIGITS), 5)
    return m


def judge_runtime(v: Verdicts, gpu_listed: bool) -> None:
    """ONNX Runtime's GPU providers, started as automl starts them, and what a session says.

    Where ``nvidia-smi`` listed no GPU, a provider that does not start is UNKNOWN, with why.
    """
    try:
        import onnxruntime as ort

        from automl.catalog import CUDA, TRT, get_backend
        from automl.catalog.runtimes._ort_packages import gpu_runtime_versions, load_gpu_libraries
        from automl.targets.presence import probe_model, provider_failure
    except ImportError as e:
        v.unknown(RUNTIME, f"automl or ONNX Runtime cannot be imported here: {e}")
        return
    if CUDA not in ort.get_available_providers():
        v.unknown(RUNTIME, f"onnxruntime {ort.__version__} here has no {CUDA} "
                           "(install: make install-gpu)")  # fmt: skip
        return
    failures = {}
    for claim, provider in (("cuda_provider_starts", CUDA), ("tensorrt_provider_starts", TRT)):
        failure = failures[provider] = v.measure(
            claim, lambda p=provider: provider_failure(p) or "", 30
        )
        if failure and not gpu_listed:
            v.say(claim, None, f"no NVIDIA GPU here, and it did not start: {failure}")
        else:
            v.say(claim, None if failure is None else not failure, failure or "a session started")
    load_gpu_libraries()
    if failures[CUDA] != "":
        v.say("cuda_graph_reported_by_the_session", None, f"{CUDA} did not start")
    else:
        cuda = get_backend("ort-cuda")
        options = cuda.provider_options("fp32", cuda_graph=True)
        session = ort.InferenceSession(probe_model(), providers=[(CUDA, options[CUDA])])
        reported = session.get_provider_options()
        v.say("cuda_graph_reported_by_the_session", cuda.runs_cuda_graph(reported),
              json.dumps(reported.get(CUDA, {}))[:400])  # fmt: skip
    versions = gpu_runtime_versions()
    v.say("runtime_versions_from_loaded_libraries", versions["cudnn"] is not None,
          json.dumps(versions))  # fmt: skip


def run_gpu_check(v: Verdicts, out: Path) -> None:
    """``bench.gpu_check --no-study`` in the budget left; each of its checks becomes a claim."""
    left = v.deadline - time.monotonic() - 10
    if left < 60:
        v.say("gpu_check", None, f"{left:.0f} s of budget left: not run")
        return
    try:
        done = subprocess.run([sys.executable, "-m", "bench.gpu_check", "--no-study", "--out",
                               str(out)], capture_output=True, text=True, timeout=left)  # fmt: skip
        checks = json.loads(out.read_text())["checks"]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
        v.say("gpu_check", None, f"{type(e).__name__}: {e}")
        return
    v.data["measurements"]["gpu_check_exit_status"] = done.returncode
    words = {"pass": True, "fail": False, "missing": None}
    for check in checks:
        v.say(f"gpu_check: {check['name']}", words.get(check["status"]), check["detail"][:400])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("device_check.json"))
    parser.add_argument("--budget-s", type=float, default=420.0)
    args = parser.parse_args(argv)
    v = Verdicts(args.out, args.budget_s)
    gpus = v.measure("nvidia_smi", nvidia_smi_gpus, 0)
    judge_listing(v, gpus)
    if gpus:
        measure_identity(v, gpus)
    else:
        v.unknown(IDENTITY, "no NVIDIA GPU here")
    import torch

    v.data["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        judge_timing(v, measure_timing(v))
    else:
        v.unknown(TIMING, f"torch {torch.__version__} sees no CUDA device")
    judge_runtime(v, bool(gpus))
    if v.data["verdicts"][0]["verdict"] == "HOLDS":
        run_gpu_check(v, args.out.with_name("gpu_check.json"))
    v.data["exit_status"] = v.exit_status()
    v.save()
    print(f"wrote {args.out}; exit status {v.data['exit_status']}", flush=True)
    return v.data["exit_status"]


if __name__ == "__main__":
    sys.exit(main())
