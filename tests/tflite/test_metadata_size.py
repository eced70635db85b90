"""The .tflite carries only the metadata a runtime or a later qconvert run needs: the permutations
of its channels-last inputs and outputs (a later `qconvert verify` pairs them with the ONNX
model's through it). Its size is bounded: under 1 KB plus a small allowance per input and output,
whatever the model's size, its equalized channels or its precision plan. What the conversion's
diagnostics need (the equalized channels' scales) goes to the report, not into the file (issue 32:
a face detector's int8 file carried 113 KB of them as JSON)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.check.verify import verify
from qconvert.driver.options import PlanOptions
from qconvert.tflite import schema_generated as S
from qconvert.tflite.reader import io_layout_metadata
from qconvert.transforms.pipeline import QuantizeOptions
from tests.harness import convert_proto, make_model

F = TensorProto.FLOAT
BOUND = 1024
PER_IO = 128  # an input's or output's name and permutation


def metadata_bytes(flatbuffer: bytes) -> int:
    """The bytes of every metadata entry of the file: its name and its buffer."""
    model = S.Model.GetRootAs(flatbuffer, 0)
    total = 0
    for k in range(model.MetadataLength()):
        entry = model.Metadata(k)
        total += len(entry.Name() or b"") + model.Buffers(entry.Buffer()).DataLength()
    return total


def wide_cnn(channels: int = 256, layers: int = 4):
    """`layers` 1x1 convs of `channels` channels whose output channels' ranges spread over 100x,
    each read by a depthwise conv that brings them back (equalize_channel_ranges rescales every
    one of them), then a global average pool."""
    rng = np.random.default_rng(0)
    spread = np.logspace(-1, 1, channels).astype(np.float32)
    nodes, inits, x, inputs = [], {}, "x", 3
    for k in range(layers):
        inits[f"w{k}"] = (rng.standard_normal((channels, inputs, 1, 1)) / np.sqrt(inputs)).astype(np.float32) \
            * spread.reshape(-1, 1, 1, 1)
        inits[f"b{k}"] = (0.1 * spread).astype(np.float32)
        inits[f"d{k}"] = (rng.standard_normal((channels, 1, 3, 3)) / 3).astype(np.float32) / spread.reshape(-1, 1, 1, 1)
        nodes += [helper.make_node("Conv", [x, f"w{k}", f"b{k}"], [f"h{k}"]),
                  helper.make_node("Conv", [f"h{k}", f"d{k}"], [f"z{k}"], group=channels, pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"z{k}"], [f"r{k}"])]
        x, inputs = f"r{k}", channels
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["y"]))
    return make_model(nodes, {"x": (F, (1, 3, 8, 8))}, {"y": F}, inits)


def multi_io():
    """Three image inputs and two outputs, channels-last in the file: five permutations."""
    rng = np.random.default_rng(1)
    inits = {f"w{k}": rng.standard_normal((4, 3, 3, 3)).astype(np.float32) for k in range(3)}
    nodes = [helper.make_node("Conv", [f"image_{k}", f"w{k}"], [f"c{k}"], pads=[1, 1, 1, 1]) for k in range(3)]
    nodes += [helper.make_node("Add", ["c0", "c1"], ["a"]), helper.make_node("Relu", ["a"], ["features_a"]),
              helper.make_node("Sub", ["c2", "c1"], ["features_b"])]
    return make_model(nodes, {f"image_{k}": (F, (1, 3, 8, 8)) for k in range(3)},
                      {"features_a": F, "features_b": F}, inits)


def samples(model, count=8):
    rng = np.random.default_rng(2)
    return {i.name: rng.uniform(-1, 1, [count, *[d.dim_value for d in i.type.tensor_type.shape.dim]])
            .astype(np.float32) for i in model.graph.input}


CASES = {
    "equalized_cnn": (wide_cnn, {}),
    "multi_io": (multi_io, {}),
    "planned": (wide_cnn, {"plan": PlanOptions(60.0)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_metadata_stays_small_and_a_later_run_reads_it(case, tmp_path):
    make, options = CASES[case]
    model = make()
    data = samples(model)
    np.savez(tmp_path / "calibration.npz", **data)
    flatbuffer, report = convert_proto(model, quantize=QuantizeOptions(),
                                       calibration=str(tmp_path / "calibration.npz"), **options)
    io = len(model.graph.input) + len(model.graph.output)
    assert metadata_bytes(flatbuffer) <= BOUND + PER_IO * io, case
    if case != "multi_io":  # what the file no longer carries: the conversion's notes keep it
        assert sum(s.size for s in report.notes.channel_scales.values()) >= 256, case
    path = tmp_path / "model.tflite"
    path.write_bytes(flatbuffer)
    layouts = io_layout_metadata(str(path))  # the later run: verify pairs the layouts through it
    assert set(layouts) == {"inputs", "outputs"}
    assert set(layouts["inputs"]) == {i.name for i in model.graph.input}, layouts
    checked = verify(model, str(path), [{k: v[n] for k, v in data.items()} for n in range(4)], 4)
    assert all(o.sqnr_db > 20 for o in checked.outputs), [(o.name, o.sqnr_db) for o in checked.outputs]
