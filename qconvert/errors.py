"""Errors a user can act on, and the limits whose excess is one.

A ConversionError means the input model cannot be converted as asked; the CLI prints its message on
one line and exits 1. Messages name the node, op, tensor or file at fault.

Limits: how much work and memory a user's files may ask of qconvert.

A hostile or mistaken input (a 1 MB .npz that inflates to 4 million samples, an Expand folded into
tens of gigabytes) must end in one clear line, not in a run that goes until the machine kills it.
Each limit has a default generous for real models and an environment variable that raises it; the
error names both. The variables are read when a limit is checked, so a test or a build system sets
them like any other QCONVERT_* variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


class ConversionError(Exception):
    """The model (or a file) cannot be converted; exit code 1."""


class ReferenceFailed(ConversionError):
    """onnxruntime, the reference a conversion is checked or calibrated against, cannot load or
    run the model (not the conversion's fault: a float conversion's default check then warns)."""


class UsageError(Exception):
    """The command line asks for something contradictory or malformed; exit code 2."""


class BelowThreshold(Exception):
    """Verification found an output (or an output's slice) below --min-sqnr; exit code 4."""


def first_line(error: Exception) -> str:
    """The first line of a library's error message (its type's name when it has none)."""
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__

@dataclass(frozen=True)
class Limit:
    what: str  # the unit counted, plural: "calibration samples"
    variable: str  # the environment variable that raises it
    default: int

    def value(self) -> int:
        text = os.environ.get(self.variable)
        if text is None or text.strip() == "":
            return self.default
        try:
            value = int(text.strip().replace("_", ""))
        except ValueError:
            value = -1
        if value < 1:
            raise UsageError(f"{self.variable}={text!r}: expected a positive whole number")
        return value

    def check(self, amount: int, where: str) -> None:
        """Raises a ConversionError naming `where`, the limit and its variable when `amount`
        exceeds the limit."""
        limit = self.value()
        if amount > limit:
            raise ConversionError(f"{where}: {amount:,} {self.what} exceed the limit of {limit:,} "
                                  f"(set {self.variable} to raise it)")

    def read(self, stream, where: str, chunk: int = 1 << 24) -> bytes:
        """All of a binary stream's bytes (a pipe, a device, an empty file) in chunks, at most
        the limit of them: the stream may never end, and one read of the limit's size would
        allocate that much up front (4 GiB: a MemoryError under an address-space limit)."""
        limit = self.value()
        chunks, size = [], 0
        while size <= limit and (block := stream.read(min(chunk, limit + 1 - size))):
            chunks.append(block)
            size += len(block)
        if size > limit:
            raise ConversionError(f"{where}: more than the limit of {limit:,} {self.what} "
                                  f"(set {self.variable} to raise it)")
        return b"".join(chunks)


CALIBRATION_SAMPLES = Limit("calibration samples", "QCONVERT_MAX_CALIBRATION_SAMPLES", 100_000)
# Decompressed size of a calibration file's arrays (an .npz member may inflate 1000x).
CALIBRATION_BYTES = Limit("bytes of calibration data", "QCONVERT_MAX_CALIBRATION_BYTES", 4 << 30)
# An ONNX file plus its external data. A .tflite cannot hold more than 2 GiB of flatbuffer.
MODEL_BYTES = Limit("bytes of ONNX model", "QCONVERT_MAX_MODEL_BYTES", 4 << 30)
# One constant produced by folding (ConstantOfShape, Expand, Tile, Range, EyeLike, OneHot, Resize,
# Concat... of constants), sized in its own dtype before it is computed (onnx/folding.py, _fold_sizes). A
# folded constant is copied a few times on its way into the .tflite (and the default check
# compares it as a graph output in float64): 256 MiB keeps a conversion within a 4 GiB
# address space; real models fold masks and position tables of a few MB.
FOLDED_BYTES = Limit("bytes in one folded constant", "QCONVERT_MAX_FOLDED_BYTES", 256 << 20)
