"""Errors a user can act on.

A ConversionError means the input model cannot be converted as asked; the CLI prints its message on
one line and exits 1. Messages name the node, op, tensor or file at fault.
"""


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
