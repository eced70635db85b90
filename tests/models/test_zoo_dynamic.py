"""The dynamic zoo's table (bench/zoo_dynamic.py) from its rows, no conversion: the sizes LiteRT
runs, how a row is classified, the fixed reasons grouped without their names."""

from __future__ import annotations

from bench import zoo_dynamic


def _row(model="bert", sizes=(1e-7, 2e-7, 3e-7), **fields):
    row = dict(key=f"hf/{model}/{model}", family=f"hf/{model}", model=model, kind="text",
               code=0, ops=150, seconds=4.0, verify_passed=True, verify_other_sizes=["a", "b"],
               batch=dict(symbol="batch", size=1, resizable=True, note=""),
               dimensions=[dict(symbol="sequence", size=64, resizable=True, fixed_because="")],
               litert=[dict(values=dict(sequence=s, batch=1), error=e)
                       for s, e in zip((7, 16, 33), sizes)])
    row.update(fields)
    row["status"], row["message"] = zoo_dynamic.classify(row)
    return row


def test_sizes_keep_a_fixed_symbol_and_put_batch_2_on_the_third():
    report = dict(batch=dict(symbol="batch", size=1, resizable=True),
                  dimensions=[dict(symbol="height", size=64, resizable=False),
                              dict(symbol="width", size=64, resizable=True)])
    sizes = zoo_dynamic.sizes_to_run("image", report)
    assert sizes == [dict(height=64, width=64, batch=1), dict(height=64, width=96, batch=1),
                     dict(height=64, width=128, batch=2)]
    fixed = dict(batch=dict(symbol="batch", size=1, resizable=False),
                 dimensions=[dict(symbol="sequence", size=64, resizable=False)])
    assert zoo_dynamic.sizes_to_run("text", fixed) == [dict(sequence=64, batch=1)]


def test_rows_are_resizable_fixed_or_failed():
    assert _row()["status"] == "resizable"
    fixed = _row(dimensions=[dict(symbol="sequence", size=64, resizable=False,
                                  fixed_because="the constant 'pos' read by ADD (node /Add) "
                                                "depends on the size")])
    assert fixed["status"] == "fixed" and "sequence: the constant 'pos'" in fixed["message"]
    wrong = _row(sizes=(1e-7, 1e-3, 1e-7))
    assert wrong["status"] == "failed" and "sequence=16,batch=1 max error 0.001" in wrong["message"]
    crashed = _row()
    crashed["litert"][2] = dict(values=dict(sequence=33, batch=2), litert_error="exit -11: -")
    assert zoo_dynamic.classify(crashed)[0] == "failed"


def test_table_cells_and_grouped_reasons():
    text = zoo_dynamic.markdown([_row(), _row("gpt2", sizes=(1e-7, 1e-3, 1e-7))])
    assert ("| hf/bert | batch, sequence | - | - | passed at 3 sizes | S=7: yes 1.0e-07 | "
            "S=16: yes 2.0e-07 | S=33: yes 3.0e-07 | 0 | 150 | 4.0 |") in text
    assert "S=16: **no** 1.0e-03" in text
    assert "**2 models: 1 resizable and exact at every size" in text and "1 failed" in text
    assert zoo_dynamic.reason_group("the constant 'pos' read by ADD (node /Add) depends on the "
                                    "size") == "the constant '…' read by ADD depends on the size"
