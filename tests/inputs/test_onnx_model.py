"""An ONNX model as given: one output, a dynamic batch axis, and its size counted."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from automl.errors import SpecError
from automl.inputs.onnx_model import count_macs, open_onnx


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = torch.relu(self.conv(x)).flatten(1)
        return hidden, self.fc(hidden)


def _export(model: nn.Module, path, outputs=("logits",)) -> None:
    torch.onnx.export(
        model.eval(), (torch.zeros(1, 1, 8, 8),), str(path), dynamo=False,
        input_names=["pixels"], output_names=list(outputs), opset_version=17,
    )  # fmt: skip


def test_a_graph_exported_at_batch_one_gets_a_dynamic_batch(tmp_path):
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Flatten(), nn.Linear(256, 10))
    _export(model, tmp_path / "m.onnx")
    summary = open_onnx(tmp_path / "m.onnx").prepare(tmp_path / "ready.onnx")
    session = ort.InferenceSession(str(tmp_path / "ready.onnx"))
    x = np.random.default_rng(0).random((5, 1, 8, 8), dtype=np.float32)
    (out,) = session.run(None, {"pixels": x})
    with torch.no_grad():
        np.testing.assert_allclose(out, model(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-5)
    # Conv: 4 x 8 x 8 outputs of 9 products; Linear: 10 outputs of 256.
    assert summary["macs_after"] == 4 * 64 * 9 + 10 * 256
    assert summary["params_after"] == 4 * 9 + 4 + 256 * 10 + 10


def test_a_graph_with_several_outputs_keeps_the_one_named(tmp_path):
    _export(TwoHeads(), tmp_path / "m.onnx", outputs=("hidden", "logits"))
    with pytest.raises(SpecError, match=r"has outputs \['hidden', 'logits'\].*--model-output"):
        open_onnx(tmp_path / "m.onnx").prepare(tmp_path / "ready.onnx")
    with pytest.raises(SpecError, match=r"model.output 'scores' is not an output"):
        open_onnx(tmp_path / "m.onnx", "scores").prepare(tmp_path / "ready.onnx")
    for output in ("logits", 1):
        open_onnx(tmp_path / "m.onnx", output).prepare(tmp_path / "ready.onnx")
        kept = [o.name for o in onnx.load(str(tmp_path / "ready.onnx")).graph.output]
        assert kept == ["logits"]


class LogitsAndProbabilities(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 10)
        self.side = nn.Linear(64, 3)  # feeds the left-out output only

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.fc(x.flatten(1))
        shift = self.side(x.flatten(1)).sum(dim=1, keepdim=True)  # a softmax ignores it
        return torch.softmax(logits + shift, dim=1), logits


def test_the_nodes_of_a_left_out_output_are_dropped_so_fp16_converts(tmp_path):
    from onnxconverter_common import float16

    _export(LogitsAndProbabilities(), tmp_path / "m.onnx", outputs=("probs", "logits"))
    summary = open_onnx(tmp_path / "m.onnx", "logits").prepare(tmp_path / "ready.onnx")
    ready = onnx.load(str(tmp_path / "ready.onnx"))
    assert "Softmax" not in {n.op_type for n in ready.graph.node}
    assert summary["params_after"] == 64 * 10 + 10  # the side head's weights are gone
    half = float16.convert_float_to_float16(ready, keep_io_types=True)
    ort.InferenceSession(half.SerializeToString(), providers=["CPUExecutionProvider"])


def test_a_graph_that_outputs_probabilities_is_refused_naming_the_fix(tmp_path, digits):
    from automl.errors import InputRefused
    from automl.search.spec import parse_spec
    from automl.trials.model_check import check_trained_model

    _export(LogitsAndProbabilities(), tmp_path / "m.onnx", outputs=("probs", "logits"))
    for output, refused in (("probs", True), ("logits", False)):
        spec = parse_spec({"model": {"weights": str(tmp_path / "m.onnx"), "output": output}})
        if refused:
            with pytest.raises(InputRefused, match=r"outputs probabilities .*--model-output"):
                check_trained_model(spec, digits)
        else:  # an untrained model, which may be refused at chance, but not for its output
            try:
                check_trained_model(spec, digits)
            except InputRefused as e:
                assert "probabilities" not in str(e)


def test_count_macs_reads_matmuls_of_any_rank():
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 7, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 7, 3])],
        [helper.make_tensor("w", TensorProto.FLOAT, [16, 3], np.zeros(48, np.float32))],
    )  # fmt: skip
    assert count_macs(helper.make_model(graph)) == 7 * 3 * 16


def test_a_missing_file_or_a_graph_that_is_not_one_is_refused(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        open_onnx(tmp_path / "none.onnx")
    (tmp_path / "bad.onnx").write_bytes(b"not a graph")
    with pytest.raises(SpecError, match="is not a valid ONNX graph"):
        open_onnx(tmp_path / "bad.onnx").prepare(tmp_path / "ready.onnx")


def test_a_graph_onnx_runtime_cannot_open_is_refused_naming_it(tmp_path, digits):
    from onnx import TensorProto, helper

    from automl.errors import InputRefused
    from automl.search.spec import parse_spec
    from automl.trials.model_check import check_trained_model

    node = helper.make_node("Unknown", ["x"], ["y"], domain="my.ops")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("my.ops", 1)],
                              ir_version=10)  # fmt: skip
    onnx.save(model, str(tmp_path / "custom.onnx"))
    spec = parse_spec({"model": {"weights": str(tmp_path / "custom.onnx")}})
    with pytest.raises(InputRefused, match=r"does not open or run in ONNX Runtime .*Unknown"):
        check_trained_model(spec, digits)


def test_a_graph_at_an_ir_version_onnx_runtime_cannot_read_is_refused_with_the_fix(
    tmp_path, digits
):
    # onnx 1.23 saves at IR 14 by default, past what ONNX Runtime 1.31 reads.
    from onnx import TensorProto, helper

    from automl.errors import SpecError
    from automl.search.spec import parse_spec
    from automl.trials.model_check import check_trained_model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])
    graph = helper.make_graph([helper.make_node("Flatten", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=99)
    onnx.save(model, str(tmp_path / "future.onnx"))
    spec = parse_spec({"model": {"weights": str(tmp_path / "future.onnx")}})
    with pytest.raises(SpecError, match=r"ir_version 99 .*set model.ir_version to the version"):
        check_trained_model(spec, digits)


def test_a_graph_replaced_after_it_was_opened_is_refused_when_prepared(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Flatten(), nn.Linear(256, 10))
    _export(model, tmp_path / "m.onnx")
    opened = open_onnx(tmp_path / "m.onnx")
    opened.prepare(tmp_path / "ready.onnx")  # as each trial does
    with torch.no_grad():
        model[2].weight.mul_(-1)  # another model, of the same graph
    _export(model, tmp_path / "m.onnx")
    with pytest.raises(SpecError, match=r"'m.onnx' has changed since it was checked .* restore"):
        opened.prepare(tmp_path / "ready.onnx")
