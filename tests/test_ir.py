"""The IR's execution order, use/def index and edit methods (qconvert/ir.py)."""

import numpy as np
import pytest

from qconvert.ir import WORK, Model, Operator


def chain(length: int = 3) -> tuple[Model, list[Operator]]:
    """x -> RELU -> t0 -> RELU -> t1 ... -> t{length-1} (a graph output)."""
    model = Model()
    model.add_array("x", (2,), np.float32)
    model.inputs.append("x")
    ops, previous = [], "x"
    for k in range(length):
        name = model.add_array(f"t{k}", (2,), np.float32)
        ops.append(model.add_operator(Operator("RELU", [previous], [name])))
        previous = name
    model.outputs.append(previous)
    return model, ops


def test_order_edits_anywhere_and_snapshot_stays_put_while_iterating():
    model, (a, b, c) = chain()
    first, last, middle = Operator("RELU", ["x"], ["f"]), Operator("RELU", ["t2"], ["z"]), \
        Operator("RELU", ["t0"], ["m"])
    for name in ("f", "z", "m"):
        model.add_array(name, (2,), np.float32)
    seen = []
    for op in model.operators:  # edits during a pass do not disturb it
        seen.append(op)
        if op is a:
            model.insert_after(None, first)
            model.insert_before(None, last)
            model.insert_after(a, middle)
            model.remove_operator(b)
    assert seen == [a, b, c]
    assert list(model.operators) == [first, a, middle, c, last]
    new = Operator("RELU", ["t0"], ["t1"])
    model.replace_operator(middle, new)
    model.set_outputs(new, ["m"])
    model.set_outputs(new, ["t1"])
    assert list(model.operators) == [first, a, new, c, last]
    assert model.has_operator(new) and not model.has_operator(middle) and not model.has_operator(b)
    model.check_invariants()


def test_the_sequence_is_not_searched_by_value():
    model, (a, _, _) = chain()
    for search in (lambda ops: a in ops, lambda ops: ops.index(a), lambda ops: ops.count(a)):
        with pytest.raises(TypeError, match="has_operator"):
            search(model.operators)


def test_operators_are_compared_by_identity():
    twin = Operator("RELU", ["x"], ["y"])
    assert Operator("RELU", ["x"], ["y"]) != twin and twin == twin


def test_index_follows_every_edit_method():
    model, (a, b, c) = chain()
    model.add_array("k", (2,), np.float32, np.ones(2, np.float32))
    assert model.producer("t1") is b and model.producer("x") is None and model.producer("") is None
    model.set_inputs(b, ["t0", "t0"])  # MUL(x, x): two uses by one op
    b.type = "MUL"
    assert model.consumers("t0") == [b, b] and model.is_discardable("t0", 2)
    model.set_input(b, 1, "k")
    assert model.consumers("t0") == [b] and model.consumers("k") == [b]
    model.set_output(a, 0, "a_out")
    model.add_array("a_out", (2,), np.float32)
    assert model.producer("a_out") is a and model.producer("t0") is None
    model.rename_uses("t0", "a_out")
    assert model.consumers("a_out") == [b] and b.inputs == ["a_out", "k"]
    model.rename_tensor("t2", "renamed")
    assert model.outputs == ["renamed"] and model.producer("renamed") is c
    assert "renamed" in model.arrays and "t2" not in model.arrays
    model.remove_unused()
    model.check_invariants()


def test_a_direct_edit_of_an_operator_in_the_model_is_caught():
    model, (_, b, _) = chain()
    b.inputs[0] = "x"  # bypasses the index
    with pytest.raises(AssertionError, match="use/def index is out of date"):
        model.check_invariants()


def test_bypass_and_remove_unused_sweep_a_dead_chain_at_once():
    model, (a, b, c, _) = chain(4)
    assert model.bypass(b)  # t1's readers read t0
    assert list(model.operators)[1].inputs == ["t0"]
    model.outputs = ["t0"]  # everything after the first op is dead now
    model.add_array("orphan", (1,), np.float32)
    assert model.remove_unused()
    assert list(model.operators) == [a] and set(model.arrays) == {"x", "t0"}
    assert not model.remove_unused()
    model.check_invariants()


def test_bypass_keeps_a_graph_output_name():
    model, (a, b, c) = chain()
    assert model.bypass(c)  # t2 is the graph output: t1 takes its name
    assert list(model.operators) == [a, b] and b.outputs == ["t2"] and model.outputs == ["t2"]
    model.check_invariants()


def test_operator_visits_are_counted():
    model, _ = chain(5)
    model.operators  # the snapshot is made: a walk of the list
    WORK.clear()
    list(model.operators)  # an iteration
    model.remove_operator(model.operators[0])  # an edit: the next snapshot walks the list
    len(model.operators)
    assert WORK["operator visits"] == 5 + 4


def test_data_to_change_in_place_only_when_nothing_else_holds_it():
    model = Model()
    model.add_array("x", (2, 3), np.float32)
    model.inputs.append("x")
    owned = model.add_constant("w", np.arange(6, dtype=np.float32).reshape(3, 2).T.copy())
    viewed = model.add_constant("v", np.ones(6, np.float32).reshape(2, 3))  # a view of a 1-D array
    shared = model.add_constant("s", np.ones((2, 3), np.float32))
    model.add_array("s2", (2, 3), np.float32, model.arrays[shared].data)  # one array, two names
    frozen = np.ones((2, 3), np.float32)
    frozen.flags.writeable = False
    frozen = model.add_constant("f", frozen)
    twice = model.add_constant("t", np.ones((2, 3), np.float32))
    for k, name in enumerate((owned, viewed, shared, "s2", frozen, twice, twice)):
        model.add_array(f"y{k}", (2, 3), np.float32)
        model.add_operator(Operator("ADD", ["x", name], [f"y{k}"]))
        model.outputs.append(f"y{k}")
    assert model.data_to_change_in_place(owned) is model.arrays[owned].data
    assert model.data_to_change_in_place(viewed) is model.arrays[viewed].data
    assert model.data_to_change_in_place(shared) is None  # "s2" holds the same array
    assert model.data_to_change_in_place(frozen) is None
    assert model.data_to_change_in_place(twice) is None  # two readers
    assert model.data_to_change_in_place("x") is None  # not a constant
    view = model.arrays[viewed].data[1:]  # any view of its memory, anywhere
    assert model.data_to_change_in_place(viewed) is None
    del view
    assert model.data_to_change_in_place(viewed) is not None


def test_bypass_gives_an_input_without_a_range_the_outputs():
    """IDENTITY(x) -> t0 with a range on t0 only (a model's QDQ pair on an Identity's output):
    its readers read x, which must keep that range, or they lose their int8 kernel."""
    from qconvert.ir import MinMax

    model, (a, b, c) = chain()
    model.arrays["t1"].minmax = MinMax(-1.0, 2.0, "qdq")
    b.type = "IDENTITY"
    assert model.bypass(b) and model.arrays["t0"].minmax == MinMax(-1.0, 2.0, "qdq")
    model.arrays["t0"].minmax = MinMax(0.0, 1.0, "calibration")
    c.type = "IDENTITY"  # t2, a graph output: t0 takes its name; nothing else moves
    model.check_invariants()
