"""Runs .tflite files in LiteRT, in a process of its own: a file qconvert wrote that crashes the
interpreter must fail its fuzz case, not kill pytest.

Reads one path per line on stdin; for each, loads the file with the default resolver (XNNPACK
delegate) and with BUILTIN_WITHOUT_DEFAULT_DELEGATES, allocates, sets every input to seeded
values of its dtype, invokes, reads every output; then prints one JSON line
{"path", "ok", "error"} and flushes, so the parent knows which file a crash happened on. Any
Python exception (LiteRT refusing the file at load, allocate or invoke) is "ok": false with the
error; a crash ends the process (the parent reports the file it was on).

Run with MALLOC_CHECK_=3 (set by the parent) so glibc aborts at the first heap corruption, on the
file that caused it, rather than on a later one.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

RESOLVERS = {"xnnpack": OpResolverType.AUTO,
             "no-delegate": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}


def _feed(detail, rng) -> np.ndarray:
    dtype = np.dtype(detail["dtype"])
    shape = tuple(int(d) for d in detail["shape"])
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -100), min(info.max, 100) + 1, shape).astype(dtype)


def run(path: str) -> None:
    """Loads, allocates and invokes `path` under each resolver; raises on any refusal."""
    for name, resolver in RESOLVERS.items():
        try:
            interpreter = Interpreter(model_path=path, num_threads=1,
                                      experimental_op_resolver_type=resolver)
            interpreter.allocate_tensors()
            rng = np.random.default_rng(0)
            for detail in interpreter.get_input_details():
                interpreter.set_tensor(detail["index"], _feed(detail, rng))
            interpreter.invoke()
            for detail in interpreter.get_output_details():
                interpreter.get_tensor(detail["index"])
        except Exception as e:
            raise RuntimeError(f"{name}: {type(e).__name__}: {' '.join(str(e).split())}") from None


def main() -> None:
    for line in sys.stdin:
        path = line.rstrip("\n")
        if not path:
            continue
        try:
            run(path)
            result = {"path": path, "ok": True, "error": None}
        except Exception as e:
            result = {"path": path, "ok": False, "error": str(e)[:500]}
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
