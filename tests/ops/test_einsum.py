"""Einsum (qconvert/ops/einsum.py) against onnxruntime: the equations exporters write (tf2onnx's
BERT attention, batched products, transposes, reductions, dot and outer products), diagonals,
"..." with broadcasting, implicit outputs, three operands, integer operands, constant weights as
FULLY_CONNECTED, and one-line refusals of malformed equations."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.tflite import reader
from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line, make_model

RNG = np.random.default_rng(29)
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def einsum_model(equation, shapes, constants=(), elem=F):
    """Einsum over inputs x0, x1, ... of `shapes`; the positions in `constants` are initializers."""
    names = [f"x{k}" for k in range(len(shapes))]
    dtype = np.float32 if elem == F else np.int64
    inits = {names[k]: RNG.standard_normal(shapes[k]).astype(dtype) for k in constants}
    inputs = {n: (elem, s) for k, (n, s) in enumerate(zip(names, shapes)) if k not in constants}
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    return make_model([node], inputs, {"y": elem}, inits, opset=12)


def op_names(flatbuffer):
    return [op.name for op in reader.read(flatbuffer).operators]


CASES = [
    ("bfnd,ndh->bfh", [(2, 5, 4, 3), (4, 3, 6)]),  # tf2onnx BERT attention output projection
    ("abc,cd->abd", [(2, 3, 4), (4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 4), (2, 3, 6, 4)]),  # attention scores
    ("bhqk,bhkd->bhqd", [(2, 3, 5, 6), (2, 3, 6, 4)]),  # attention context
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)]),
    ("...ij,...jk->...ik", [(2, 1, 4, 5), (1, 3, 5, 6)]),  # "..." axes broadcast
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("...ii->...i", [(2, 3, 4, 4)]),
    ("iij->j", [(3, 3, 2)]),
    ("i,i->", [(7,), (7,)]),
    ("i,i", [(7,), (7,)]),  # implicit output: a scalar
    ("ij,j->i", [(3, 5), (5,)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij->i", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("bij,bkj->bik", [(2, 3, 4), (2, 5, 4)]),  # B read transposed (adj_y)
    ("bji,bjk->bik", [(2, 4, 3), (2, 4, 5)]),  # A read transposed (adj_x)
    ("ijk,ikl->jl", [(3, 4, 5), (3, 5, 2)]),  # two contracted labels
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)]),  # three operands, left to right
    ("ij,jk", [(2, 3), (3, 4)]),  # implicit: "ik"
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),  # bilinear (torch.nn.Bilinear)
    ("ijk->kji", [(2, 3, 4)]),
    ("ij,kj->ikj", [(2, 3), (4, 3)]),  # batch label j in the middle
    ("ibnd,jbnd->bnij", [(5, 2, 3, 4), (6, 2, 3, 4)]),  # Transformer-XL
]


@pytest.mark.parametrize("equation,shapes", CASES, ids=[c[0] for c in CASES])
def test_einsum_matches_onnxruntime(equation, shapes):
    assert_matches_onnxruntime(einsum_model(equation, shapes))


# A label of size 1 in one operand and n in another broadcasts (onnxruntime and numpy agree).
BROADCAST_LABELS = [
    ("bij,bjk->bik", [(2, 3, 4), (1, 4, 5)]),  # a kept batch label
    ("ij,jk->ik", [(3, 1), (4, 5)]),  # a contracted label: the other operand summed over it
    ("ij,jk->ik", [(3, 4), (1, 5)]),
    ("ij,ij->ij", [(3, 4), (1, 4)]),  # elementwise
    ("ij,ij->i", [(3, 1), (3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 4), (2, 1, 6, 4)]),  # three heads' queries against one
    ("ij,jk,k->ik", [(3, 4), (1, 5), (5,)]),
]


@pytest.mark.parametrize("equation,shapes", BROADCAST_LABELS, ids=str)
def test_a_size_one_label_broadcasts(equation, shapes):
    assert_matches_onnxruntime(einsum_model(equation, shapes))


def test_a_kept_label_sized_1_first_is_refused_naming_shape_inference():
    """ONNX's shape inference sizes the output's b from the first operand (1) where onnxruntime
    broadcasts it to 2: the inferred [1, 3, 5] is what qconvert would write, so it refuses."""
    assert_refused_in_one_line(einsum_model("bij,bjk->bik", [(1, 3, 4), (2, 4, 5)]),
                               "label 'b' is 1 in the first operand.*ONNX's shape inference")


def test_a_size_one_label_against_constant_weights():
    assert_matches_onnxruntime(einsum_model("abc,cd->abd", [(2, 3, 1), (4, 5)], constants=(1,)))


@pytest.mark.parametrize("equation,shapes,constant", [
    ("bfnd,ndh->bfh", [(2, 5, 4, 3), (4, 3, 6)], 1),
    ("abc,cd->abd", [(2, 3, 4), (4, 5)], 1),
    ("ij,jk->ik", [(3, 4), (4, 5)], 0),  # a constant left operand: the product swaps
    ("bfh,hnd->bfnd", [(2, 5, 6), (6, 4, 3)], 1),  # BERT attention's query projection
], ids=str)
def test_constant_weights_are_fully_connected(equation, shapes, constant):
    flatbuffer, _ = assert_matches_onnxruntime(einsum_model(equation, shapes, constants=(constant,)))
    ops = op_names(flatbuffer)
    assert "FULLY_CONNECTED" in ops and "BATCH_MATMUL" not in ops, ops


def test_attention_product_reads_transposed_operand_without_transpose():
    flatbuffer, _ = assert_matches_onnxruntime(einsum_model("bhqd,bhkd->bhqk", [(1, 2, 5, 4), (1, 2, 6, 4)]))
    assert op_names(flatbuffer).count("TRANSPOSE") == 0, op_names(flatbuffer)


@pytest.mark.parametrize("equation,shapes", [("ij,jk->ik", [(3, 4), (4, 5)]), ("i,i->", [(6,), (6,)]),
                                             ("ii->i", [(3, 3)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)])],
                         ids=str)
def test_integer_operands(equation, shapes):
    model = einsum_model(equation, shapes, elem=I64)
    feeds = {f"x{k}": RNG.integers(-5, 6, s).astype(np.int64) for k, s in enumerate(shapes)}
    assert_matches_onnxruntime(model, feeds, rtol=0, atol=0)


@pytest.mark.parametrize("equation,shapes,match", [
    ("ij,jk->ik", [(3, 4), (5, 6)], "label 'j' has sizes 4 and 5"),
    ("ij->ik", [(3, 4)], "output labels must be distinct operand labels"),
    ("i1->i", [(3, 4)], "not letters"),
    ("ijk->i", [(3, 4)], "does not have rank 2"),
    ("...ij->ij", [(2, 3, 4)], "'...' axes the output omits"),
], ids=str)
def test_malformed_equations_are_refused_in_one_line(equation, shapes, match):
    """The output declared [3] (ONNX shape inference refuses most of these equations itself, but
    a declared output shape brings the node to the importer)."""
    model = einsum_model(equation, shapes)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", F, [3]))
    assert_refused_in_one_line(model, match)


def test_constant_weights_quantize_as_int8_fully_connected(tmp_path):
    """tf2onnx's attention projection with int8 weights (grid_weights: exact per channel)."""
    from tests.harness import assert_int8_matches_onnxruntime, grid_weights

    model = einsum_model("bfnd,ndh->bfh", [(1, 5, 4, 3), (4, 3, 6)], constants=(1,))
    weights = grid_weights((6, 12), seed=2).T.reshape(4, 3, 6)
    model.graph.initializer[0].CopyFrom(helper.make_tensor("x1", F, (4, 3, 6), weights.ravel()))
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path)
    assert "FULLY_CONNECTED" in op_names(flatbuffer)


@pytest.mark.parametrize("equation,shapes", [("abcdij,abcdjk->abcdik", [(2, 2, 1, 2, 3, 4), (2, 2, 1, 2, 4, 5)])],
                         ids=str)
def test_more_than_three_batch_axes_merge_into_one(equation, shapes):
    assert_matches_onnxruntime(einsum_model(equation, shapes))


def test_bert_attention_keeps_a_dynamic_batch_resizable():
    """tf2onnx's BERT attention einsums with batch "N": the batch stays axis 0 through every op,
    so the .tflite resizes to batch 3 and matches onnxruntime there."""
    from tests.test_dynamic_batch import assert_resizes_to_the_feeds_batch

    weights = {name: RNG.standard_normal(shape).astype(np.float32)
               for name, shape in [("wq", (6, 2, 3)), ("wk", (6, 2, 3)), ("wo", (2, 3, 6))]}
    nodes = [helper.make_node("Einsum", ["x", "wq"], ["q"], equation="BFH,HND->BFND"),
             helper.make_node("Einsum", ["x", "wk"], ["k"], equation="BFH,HND->BFND"),
             helper.make_node("Einsum", ["q", "k"], ["s"], equation="BFNH,BTNH->BNFT"),
             helper.make_node("Einsum", ["s", "k"], ["c"], equation="BNFT,BTNH->BFNH"),
             helper.make_node("Einsum", ["c", "wo"], ["y"], equation="BFND,NDH->BFH")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["N", 5, 6])],
                              [helper.make_tensor_value_info("y", F, None)],
                              [helper.make_tensor(n, F, w.shape, w.ravel()) for n, w in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)], ir_version=8)
    assert_resizes_to_the_feeds_batch(model, {"x": RNG.standard_normal((3, 5, 6)).astype(np.float32)},
                                      atol=1e-5)
