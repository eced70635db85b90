"""The zoo's quantized table (bench/zoo_quantized.py) from results.json rows, no conversion: which
rows are findings (a non-zero exit, a file above 1.1x its ONNX file, an SQNR below its bound),
the float formats left out, the files onnxruntime cannot run listed apart."""

from __future__ import annotations

from bench import zoo_quantized


def _row(model, fmt="qdq", **fields):
    row = dict(family="hf/" + model, model=model, exporter="ts17", format=fmt, status="converted",
               code=0, bound_db=28.0, sqnr_db=32.0, size=0.9, file=f"/zoo/{model}.onnx",
               mix=dict(int8=40, hybrid=0, float=10))
    row.update(fields)
    return row


def test_findings_are_a_failed_exit_a_big_file_and_a_measure_below_the_bound():
    rows = [_row("bert"), _row("gpt2", status="wrong", code=4,
                               message="verify: output 10.6 dB, below the 27.6 dB the model's own "
                                       "rounding explains (--no-verify writes it anyway)"),
            _row("vit", size=1.21), _row("deit", sqnr_db=20.0),
            _row("swin", "dynint8", bound_db=None, sqnr_db="inf", mix=dict(int8=0, hybrid=13,
                                                                           float=100)),
            _row("bert", "float", status="exact"),
            _row("t5", status="export failed", message="onnxruntime cannot run it: Gather")]
    text = zoo_quantized.table(rows)
    assert "| hf/bert | qdq | 0 | 28.0 | 32.0 | 0.90 | 40 / 0 / 10 |" in text
    assert "| hf/swin | dynint8 | 0 | - | inf | 0.90 | 0 / 13 / 100 |" in text
    assert "| hf/gpt2 | qdq | 4 |  |  |  | output 10.6 dB, below the 27.6 dB" in text
    assert "float |" not in text  # the float export is not a quantized row
    assert "4 of 5 exit 0; 3 findings:" in text
    findings = [line for line in text.splitlines() if line.startswith("- hf/")]
    assert [f.split(" (")[0] for f in findings[:3]] == ["- hf/deit qdq", "- hf/gpt2 qdq",
                                                        "- hf/vit qdq"]
    assert "1.21x the ONNX file" in findings[2] and "below its bound" in findings[0]
    assert findings[3] == "- hf/t5 qdq: onnxruntime cannot run it: Gather"
