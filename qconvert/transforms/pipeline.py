"""The transformation pipeline: the one place that says which steps run, in which order.

Each step is one function in its own file; run_to_fixed_point repeats the list until no step
changes the model, so a step that must wait for another simply does nothing until then.
"""

from __future__ import annotations

from ..ir import Model
from .channels_last_io import channels_last_io
from .distribute_binary_over_concatenation import distribute_binary_over_concatenation
from .engine import Step, run_to_fixed_point
from .fold_constants import fold_constants
from .fold_transpose_into_fully_connected import fold_transpose_into_fully_connected
from .fuse_activation import fuse_activation
from .fuse_binary_into_affine import fuse_binary_into_affine
from .hoist_transpose_through_reshape import hoist_transpose_through_reshape
from .identify_gelu import identify_gelu
from .identify_relu6 import identify_relu6
from .merge_reshapes import merge_reshapes
from .remove_identity import remove_identity
from .sink_transpose_through_reshape import sink_transpose_through_reshape
from .sink_transposes import sink_transposes
from .transpose_to_reshape import transpose_to_reshape

FLOAT_STEPS: list[tuple[str, Step]] = [
    ("remove_identity", remove_identity),
    ("fold_constants", fold_constants),
    ("hoist_transpose_through_reshape", hoist_transpose_through_reshape),
    ("sink_transpose_through_reshape", sink_transpose_through_reshape),
    ("sink_transposes", sink_transposes),
    ("transpose_to_reshape", transpose_to_reshape),
    ("merge_reshapes", merge_reshapes),
    ("fold_transpose_into_fully_connected", fold_transpose_into_fully_connected),
    ("distribute_binary_over_concatenation", distribute_binary_over_concatenation),
    ("fuse_binary_into_affine", fuse_binary_into_affine),
    ("identify_relu6", identify_relu6),
    ("identify_gelu", identify_gelu),
    ("fuse_activation", fuse_activation),
]


def build_pipeline(io_layout: str = "nhwc") -> list[tuple[str, Step]]:
    steps = list(FLOAT_STEPS)
    if io_layout == "nhwc":
        # Before sink_transposes: an input's NCHW->NHWC transpose is absorbed into the input
        # rather than moved below the first op (a PAD, say), where it would stay.
        steps.insert(1, ("channels_last_io", channels_last_io))
    return steps


def run_pipeline(model: Model, io_layout: str = "nhwc") -> None:
    run_to_fixed_point(model, build_pipeline(io_layout))
