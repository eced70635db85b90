"""The summary line's float ops (qconvert/driver/reports.py): grouped by reason, a group's reason
with what differs between its ops elided, and the count of groups not shown."""

from __future__ import annotations

from qconvert.driver.reports import SHOWN_FLOAT_GROUPS, FloatOp, _float_groups


def test_ops_whose_reasons_differ_in_a_name_share_a_group_with_the_name_elided():
    ops = [FloatOp("ADD", "a", "tensor 'Add:0' has no calibrated range"),
           FloatOp("MUL", "m", "tensor 'pow:0' has no calibrated range"),
           FloatOp("SOFTMAX", "s", "its output is a model output: in float it keeps ...")]
    assert _float_groups(ops) == ("ADD, MUL (tensor '...' has no calibrated range); "
                                  "SOFTMAX (its output is a model output)")


def test_the_same_reason_is_shown_as_it_is_and_counted_by_op():
    ops = [FloatOp("CONV_2D", f"c{k}", "kept float by --keep-float") for k in range(3)]
    assert _float_groups(ops) == "3 CONV_2D (kept float by --keep-float)"


def test_groups_beyond_the_shown_are_counted():
    ops = [FloatOp("ADD", str(k), f"reason number {'x' * k}") for k in range(SHOWN_FLOAT_GROUPS + 1)]
    assert _float_groups(ops).endswith("; 1 more reason (--json lists each op's)")
    ops.append(FloatOp("ADD", "y", "yet another"))
    assert _float_groups(ops).endswith("; 2 more reasons (--json lists each op's)")
