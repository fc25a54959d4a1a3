"""Whether a provider starts here: the one-node probe every GPU presence check runs."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from automl.targets.presence import provider_starts


def test_a_provider_counts_only_once_a_session_starts_on_it() -> None:
    # TensorRT's provider loads libnvinfer only when a session starts; one that cannot start
    # leaves the session on another provider or raises, and is not counted.
    assert provider_starts("CPUExecutionProvider")
    assert not provider_starts("NoSuchExecutionProvider")
    if "TensorrtExecutionProvider" not in ort.get_available_providers():
        assert not provider_starts("TensorrtExecutionProvider")


def test_the_probe_graph_is_in_an_ir_version_every_supported_runtime_reads() -> None:
    import onnx

    from automl.targets.presence import PROBE_IR_VERSION, probe_model

    model = onnx.load_from_string(probe_model())
    assert model.ir_version == PROBE_IR_VERSION <= 13  # ORT-GPU 1.31 reads IR 13 at most
    assert ort.InferenceSession(probe_model()).run(None, {"x": np.ones((1, 8), np.float32)})


def test_a_provider_that_does_not_start_says_why() -> None:
    from automl.targets.presence import provider_failure

    assert provider_failure("CPUExecutionProvider") is None
    why = provider_failure("NoSuchExecutionProvider")
    assert why and "IR version" not in why and "libcublas" not in why
