"""The pages that list methods say what the catalog and the targets say."""

from __future__ import annotations

import re
from pathlib import Path

from automl.catalog import CUDA, TRT
from automl.targets import list_targets

DOCS = Path(__file__).resolve().parents[2] / "docs"
ROW = re.compile(
    r"^\| `(?P<method>[a-z0-9-]+)` \| ONNX Runtime (?P<provider>\w+) provider \|", re.M
)
PROVIDERS = {"CUDA": CUDA, "TensorRT": TRT}


def test_the_gpu_page_lists_each_nvidia_method_on_the_backend_that_runs_it() -> None:
    rows = {
        m["method"]: PROVIDERS[m["provider"]] for m in ROW.finditer((DOCS / "gpu.md").read_text())
    }
    expected = {
        method: target.backend_for(method).provider
        for target in list_targets()
        if target.kind == "cuda"
        for method in target.methods
    }
    assert rows == expected


def test_the_quantization_page_lists_the_cpu_targets_methods_in_its_order() -> None:
    page = (DOCS / "quantization.md").read_text()
    listed = re.findall(r"^- `(?P<method>[a-z0-9-]+)`: ", page, re.M)
    (cpu,) = (t for t in list_targets() if t.name == "cpu")
    assert listed == list(cpu.methods)
