"""The transformation pipeline: the one place that says which steps run, in which order.

Each step is one function in its own file. The float steps run to a fixed point (the list repeats
until no step changes the model, so a step that must wait for another simply does nothing until
then). With --quantize, the quantize steps then run once each, in order: each builds on the
decisions of the ones before it; with --weight-only or --float16, the one weight step runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

from ..ir import Model
from ..quantize.rounding import InputMoments
from .quantization import Int16Choice
from .affine_to_depthwise import affine_to_depthwise
from .average_pool_to_depthwise import average_pool_to_depthwise
from .center_batch_matmul_operand import center_batch_matmul_operand
from .channels_last_io import channels_last_io
from .check_quantization import check_quantization
from .clamp_by_quantized_range import clamp_by_quantized_range
from .decompose_hard_swish import decompose_hard_swish
from .distribute_binary_over_concatenation import distribute_binary_over_concatenation
from .distribute_split_over_concatenation import distribute_split_over_concatenation
from .divide_as_multiply import divide_as_multiply
from .equalize_channel_ranges import equalize_channel_ranges
from .engine import Step, run_once, run_to_fixed_point
from .fold_constants import fold_constants
from .fold_transpose_into_fully_connected import fold_transpose_into_fully_connected
from .fuse_activation import fuse_activation
from .fuse_binary_into_affine import fuse_binary_into_affine
from .fuse_binary_into_following_affine import fuse_binary_into_following_affine
from .hoist_transpose_through_reshape import hoist_transpose_through_reshape
from .identify_activations import identify_activations
from .identify_gelu import identify_gelu
from .identify_relu6 import identify_relu6
from .insert_quantize_dequantize import insert_quantize_dequantize
from .keep_mixed_concatenation_float import keep_mixed_concatenation_float
from .keep_normalization_statistics_float import keep_normalization_statistics_float
from .keep_requested_float import keep_requested_float
from .keep_unrepresentable_float import keep_unrepresentable_float
from .merge_constant_binary_chains import merge_constant_binary_chains
from .merge_reshapes import merge_reshapes
from .prelu_to_leaky_relu import prelu_to_leaky_relu
from .propagate_minmax import propagate_minmax
from .quantize_activations import quantize_activations
from .quantize_biases import quantize_biases
from .quantize_weights import quantize_weights
from .quantize_weights_only import quantize_weights_only
from .remove_identity import remove_identity
from .remove_trivial_activation import remove_trivial_activation
from .resize_nearest_to_depth_to_space import resize_nearest_to_depth_to_space
from .saturate_masked_scores import saturate_masked_scores
from .sink_transpose_through_reshape import sink_transpose_through_reshape
from .sink_transposes import sink_transposes
from .store_integer_weights import restore_float_weights, store_integer_weights
from .store_weights_float16 import store_weights_float16
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
    ("distribute_split_over_concatenation", distribute_split_over_concatenation),
    ("merge_constant_binary_chains", merge_constant_binary_chains),
    ("fuse_binary_into_affine", fuse_binary_into_affine),
    ("fuse_binary_into_following_affine", fuse_binary_into_following_affine),
    ("identify_relu6", identify_relu6),
    ("identify_gelu", identify_gelu),
    ("identify_activations", identify_activations),
    ("fuse_activation", fuse_activation),
]


@dataclass(frozen=True)
class QuantizeOptions:
    """The choices of --quantize that the quantize steps need (calibration happens before)."""

    io_type: str = "float"  # "float", "int8" or "uint8"
    per_tensor_fc: bool = False
    default_range: tuple[float, float] | None = None
    # Source nodes whose ops stay float, with the reason (--keep-float, the precision planner).
    keep_float: Mapping[str, str] = field(default_factory=dict)
    activations: str = "int8"  # "int16": every op with a 16x8 kernel runs it (--activations)
    # Source nodes whose ops run their 16x8 kernel in an int8 model, with the reason (the planner).
    int16_nodes: Mapping[str, str] = field(default_factory=dict)
    # Source nodes kept float whose weighted ops run TFLite's hybrid kernels, int8 weights with
    # float activations (the planner's hybrid regions; each is in keep_float too).
    hybrid_nodes: frozenset[str] = frozenset()
    # The weighted ops' input moments on the calibration samples, by op output
    # (plan/layer_inputs.py): weights rounded for the output, biases corrected (quantize_weights).
    layer_inputs: Mapping[str, InputMoments] = field(default_factory=dict)
    round_for_output: bool = True  # --weight-rounding output (nearest: False)
    correct_bias: bool = True  # not --no-bias-correction
    equalize: bool = True  # not --no-equalization
    # The target runs float ops (targets/): the rule that keeps normalization statistics float
    # applies; on an integer-only target they stay integer and the precision plan measures them.
    float_ops: bool = True

    @property
    def int16(self) -> Int16Choice:
        return Int16Choice(self.activations == "int16", self.int16_nodes)


def quantize_steps(options: QuantizeOptions) -> list[tuple[str, Step]]:
    return [
        ("restore_float_weights", restore_float_weights),  # a dynamic int8 model's, from run_pipeline
        ("keep_requested_float", partial(keep_requested_float, keep_float=options.keep_float)),
        ("divide_as_multiply", divide_as_multiply),
        ("affine_to_depthwise", partial(affine_to_depthwise,
                                        ranges_needed=options.default_range is None)),
        ("prelu_to_leaky_relu", prelu_to_leaky_relu),
        ("keep_mixed_concatenation_float", partial(keep_mixed_concatenation_float,
                                                   float_outputs=options.io_type == "float")),
        *([("keep_normalization_statistics_float", keep_normalization_statistics_float)]
          if options.float_ops else []),
        ("clamp_by_quantized_range", partial(clamp_by_quantized_range, int16=options.int16)),
        ("decompose_hard_swish", partial(decompose_hard_swish, int16=options.int16)),
        ("resize_nearest_to_depth_to_space", partial(resize_nearest_to_depth_to_space, int16=options.int16)),
        ("average_pool_to_depthwise", partial(average_pool_to_depthwise, int16=options.int16)),
        ("saturate_masked_scores", partial(saturate_masked_scores, float_outputs=options.io_type == "float",
                                           int16=options.int16)),
        ("center_batch_matmul_operand", partial(center_batch_matmul_operand, int16=options.int16)),
        ("propagate_minmax", partial(propagate_minmax, default_range=options.default_range,
                                     int16=options.int16)),
        ("keep_unrepresentable_float", partial(keep_unrepresentable_float, int16=options.int16)),
        ("quantize_activations", partial(quantize_activations, float_outputs=options.io_type == "float",
                                         int16=options.int16)),
        ("quantize_weights", partial(quantize_weights, per_tensor_fc=options.per_tensor_fc,
                                     layer_inputs=options.layer_inputs,
                                     round_for_output=options.round_for_output,
                                     correct_bias=options.correct_bias)),
        ("quantize_biases", quantize_biases),
        ("insert_quantize_dequantize", partial(insert_quantize_dequantize, io_type=options.io_type)),
        ("remove_trivial_activation", remove_trivial_activation),
        ("quantize_weights_only", partial(quantize_weights_only, sources=options.hybrid_nodes)),
        ("check_quantization", check_quantization),
    ]


def weight_steps(mode: str, min_elements: int = 1024) -> list[tuple[str, Step]]:
    """--weight-only ("int8") or --float16 ("float16"): only the stored weights change."""
    if mode == "int8":
        return [("quantize_weights_only", partial(quantize_weights_only, min_elements=min_elements))]
    return [("restore_float_weights", restore_float_weights),
            ("store_weights_float16", store_weights_float16)]


def build_pipeline(io_layout: str = "nhwc") -> list[tuple[str, Step]]:
    steps = list(FLOAT_STEPS)
    if io_layout == "nhwc":
        # Before sink_transposes: an input's NCHW->NHWC transpose is absorbed into the input
        # rather than moved below the first op (a PAD, say), where it would stay.
        steps.insert(1, ("channels_last_io", channels_last_io))
    return steps


def run_pipeline(model: Model, io_layout: str = "nhwc") -> None:
    """The float steps to a fixed point; the bodies of control-flow ops (IF, WHILE) first, with
    the ONNX layout at their boundary (their inputs and outputs are the op's, by position)."""
    for body in model.subgraphs():
        run_to_fixed_point(body, build_pipeline("onnx"))
    run_to_fixed_point(model, build_pipeline(io_layout))
    run_once(model, [("store_integer_weights", store_integer_weights)])  # dynamic int8 ONNX


def run_equalization(model: Model, layer_inputs: Mapping[str, InputMoments]) -> dict[str, InputMoments]:
    """After run_pipeline, before the quantize steps, with the weighted ops' input moments
    measured on the float model: the one float step that needs measured data
    (equalize_channel_ranges, exact in float). Returns the moments of the equalized model."""
    return equalize_channel_ranges(model, layer_inputs)


def run_quantize_pipeline(model: Model, options: QuantizeOptions) -> None:
    """After run_pipeline, on a model whose arrays carry calibrated ranges."""
    run_once(model, quantize_steps(options))


def run_weight_pipeline(model: Model, mode: str, min_elements: int = 1024) -> None:
    """After run_pipeline: store the weights as int8 (hybrid kernels) or float16."""
    run_once(model, weight_steps(mode, min_elements))
