"""qconvert: convert float ONNX models to TFLite flatbuffers, float32 or quantized.

Command line: `qconvert IN.onnx OUT.tflite [options]` (qconvert/cli.py). Python:
`qconvert.convert(model, ...)` below (and `qconvert.fake_quant(model, ...)`, the fake-quant ONNX
graph of `qconvert fakequant`), with the command line's conversion options as keywords and
its errors as exceptions (ConversionError: exit 1, UsageError: exit 2). Importing qconvert stays
light: onnx, onnxruntime and LiteRT are imported when convert runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, NamedTuple

from .errors import BelowThreshold, ConversionError, UsageError

from .version import __version__
__all__ = ["BelowThreshold", "Conversion", "ConversionError", "FakeQuant", "UsageError", "convert",
           "fake_quant", "__version__"]


class Conversion(NamedTuple):
    """What convert returns (unpacks as `tflite, report = qconvert.convert(...)`)."""

    tflite: bytes  # the TFLite flatbuffer, as a .tflite file holds it
    report: Any  # reports.ConversionReport: .as_dict() is the CLI's --json, .summary() its line


def convert(model, *, input_shapes: Mapping | None = None, io_layout: str = "nhwc",
            quantize: bool = False, calibration=None, calibration_samples: int | None = None,
            calibration_method: str | None = None, mean=None, std=None, sample_rate: int | None = None,
            default_range=None, io_type: str | None = None,
            activations: str | None = None, per_tensor_fc: bool = False,
            weight_rounding: str | None = None, bias_correction: bool = True, equalization: bool = True,
            weight_only: bool = False,
            weight_only_min_elements: int | None = None, float16: bool = False,
            keep_float=(), precision: str | None = None, target_sqnr: float | None = None,
            target: str | None = None, evaluate=None, max_drop: float | None = None,
            verify: bool = False, verify_samples: int | None = None, verify_data=None,
            min_sqnr: float | None = None, report=None, latency: bool = False) -> Conversion:
    """Converts an ONNX model to a TFLite flatbuffer, as `qconvert IN.onnx OUT.tflite` does.

    `model`: a path (str or os.PathLike), the bytes of an .onnx file, or an onnx.ModelProto (not
    modified; external data of bytes or a ModelProto is looked up from the current directory).

    `calibration` (with quantize=True): a path (an .npz or a directory, as --calibration); a dict
    {input name: array}, laid out as an .npz's arrays (first axis = samples); or an iterable of
    samples, each a dict {input name: array in the input's shape}, like TFLiteConverter's
    representative_dataset (a function returning one is called). An iterable is read up to
    `calibration_samples` samples, and at most errors.CALIBRATION_SAMPLES. A directory of images
    or .wav files (as --calibration and `verify_data` take, for a model with one input) becomes
    samples by `mean` and `std` (a number, a sequence of one per channel, or "0.485,0.456,0.406")
    and `sample_rate` (Hz), the flags --mean, --std and --sample-rate.

    The other keywords are the command line's flags (`input_shapes={"x": (1, 3, 224, 224)}` is
    --input-shape x:1,3,224,224; `default_range=(-6, 6)` or "-6,6"; `keep_float` a pattern or a
    list of them), with the same defaults, checks and messages, but for the verification: the
    command line verifies every conversion, the API when asked (`verify=True`, or any of
    verify_samples, verify_data, min_sqnr, report: a FILE.json or FILE.html path), as the
    command line does; its result is the report's `verify`, and a verified quantized or
    weight-stored conversion is timed against its float model when `latency=True` (the report's
    `latency`, LiteRT on this CPU: a report, never an input to the conversion).

    `evaluate` and `max_drop` (the API only): the plan holds a metric instead of --target-sqnr.
    evaluate({output name: array}) -> score, higher is better, gets each output of the plan's
    samples stacked on a first axis (the first verify_samples samples of verify_data, else of
    the calibration data, in their order: labels can be lined up with them); the plan keeps the
    fewest ops float whose score is at most `max_drop` below the float model's. The report's
    quantization.plan.metric has both scores.

    Returns Conversion(tflite=bytes, report=ConversionReport). Raises UsageError for malformed or
    contradictory arguments, ConversionError when the model or the data cannot be converted and
    BelowThreshold when the verification fails, with the messages the command line prints.
    """
    flags = dict(locals())  # the keywords are the command line's flags (first: nothing else yet)
    from .driver.conversion import convert as convert_source

    asked = verify or any(v is not None for v in (verify_samples, verify_data, min_sqnr, report))
    flags["no_bias_correction"] = not flags.pop("bias_correction")
    flags["no_equalization"] = not flags.pop("equalization")
    source, data, options = _options(flags, no_verify=not asked)
    flatbuffer, report = convert_source(source, options, data=data, output_name="<bytes>")
    return Conversion(flatbuffer, report)


class FakeQuant(NamedTuple):
    """What fake_quant returns (unpacks as `onnx_bytes, report = qconvert.fake_quant(...)`)."""

    onnx: bytes  # the fake-quant ONNX model, as an .onnx file holds it
    report: Any  # reports.FakeQuantReport: .as_dict() is the CLI's --json, .summary() its line


def fake_quant(model, *, calibration=None, input_shapes: Mapping | None = None,
               calibration_samples: int | None = None, calibration_method: str | None = None,
               mean=None, std=None, sample_rate: int | None = None, default_range=None, activations: str | None = None, per_tensor_fc: bool = False,
               weight_rounding: str | None = None, bias_correction: bool = True,
               equalization: bool = True, keep_float=(), precision: str | None = None,
               target_sqnr: float | None = None, target: str | None = None) -> FakeQuant:
    """The fake-quant ONNX model, as `qconvert fakequant IN.onnx OUT.onnx` writes it: Q/DQ pairs
    where the int8 conversion with these options quantizes, holding its params (qdq/fakequant.py).
    Arguments as convert's with quantize=True."""
    flags = dict(locals())  # the keywords are the command line's flags (first: nothing else yet)
    from .driver.conversion import fake_quant as fake_quant_source

    flags["no_bias_correction"] = not flags.pop("bias_correction")
    flags["no_equalization"] = not flags.pop("equalization")
    source, data, options = _options(flags, quantize=True, no_verify=True)
    written, report = fake_quant_source(source, options, data=data, output_name="<bytes>")
    return FakeQuant(written, report)


def _options(flags: dict, **fixed):
    """(source, data, Options) for the API's keywords `flags` (`model` among them) and `fixed`,
    checked as the command line checks its flags."""
    from .driver.options import options_from_flags

    source, data = _model_source(flags.pop("model"))
    flags["input_shapes"] = _shapes(flags["input_shapes"])
    flags["calibration"] = _calibration_source(flags["calibration"], flags["calibration_samples"])
    for name in ("verify_data", "report"):
        if name in flags:
            flags[name] = _path(flags[name])
    return source, data, options_from_flags(**flags, **fixed)


def _shapes(shapes) -> Mapping:
    if shapes is None:
        return {}
    if not isinstance(shapes, Mapping):
        raise UsageError(f"input_shapes: expected a dict {{input name: dims}}, not {type(shapes).__name__}")
    return shapes


def _path(value) -> str | None:
    return None if value is None else os.fsdecode(os.fspath(value))


def _model_source(model) -> tuple[str, bytes | None]:
    """The driver's (source, data) for convert's `model`."""
    if isinstance(model, (str, os.PathLike)):
        path = os.fsdecode(os.fspath(model))
        from .driver.files import check_input_file

        check_input_file(path)
        return path, None
    if isinstance(model, (bytes, bytearray, memoryview)):
        return "<bytes>", bytes(model)
    import onnx

    if isinstance(model, onnx.ModelProto):
        try:  # a copy: the conversion frees the weights of the model it reads
            return "<ModelProto>", model.SerializeToString()
        except ValueError as e:  # over protobuf's 2 GiB: save it with external data, give the path
            raise ConversionError(f"<ModelProto>: cannot be serialized: {e}") from None
    raise UsageError(f"model: expected a path, bytes or an onnx.ModelProto, not "
                     f"{type(model).__name__}")


def _calibration_source(calibration, count: int | None):
    """A path (str) or a dict {input name: array} for the options' `calibration`."""
    if calibration is None:
        return None
    if isinstance(calibration, (str, os.PathLike)):
        return os.fsdecode(os.fspath(calibration))
    if isinstance(calibration, Mapping):
        return calibration
    if callable(calibration):  # representative_dataset is a function returning an iterator
        calibration = calibration()
    if isinstance(calibration, (bytes, bytearray)) or not hasattr(calibration, "__iter__"):
        raise UsageError("calibration: expected a path, a dict of arrays or an iterable of input "
                         f"dicts, not {type(calibration).__name__}")
    return _stacked_samples(calibration, count)


def _stacked_samples(samples, count: int | None) -> dict:
    """The first `count` samples of an iterable of {input name: array} as {input name: [samples,
    ...] array}: the layout calibration_data checks. Reading stops at errors.CALIBRATION_SAMPLES,
    so an endless generator ends in an error naming the limit."""
    import numpy as np

    from .errors import CALIBRATION_SAMPLES

    columns: dict[str, list] = {}
    for i, sample in enumerate(samples):
        if count is not None and i >= count:
            break
        CALIBRATION_SAMPLES.check(i + 1, "calibration")
        if not isinstance(sample, Mapping):
            raise ConversionError(f"calibration: sample {i} is a {type(sample).__name__}; each "
                                  "sample must be a dict {input name: array}")
        if i and sample.keys() != columns.keys():
            raise ConversionError(f"calibration: sample {i} has inputs {sorted(sample)}, sample 0 "
                                  f"has {sorted(columns)}")
        for name, value in sample.items():
            try:
                columns.setdefault(name, []).append(np.asarray(value))
            except (TypeError, ValueError) as e:
                raise ConversionError(f"calibration: sample {i}: input {name!r} is not an array: "
                                      f"{e}") from None
    stacked = {}
    for name, arrays in columns.items():
        shapes = [a.shape for a in arrays]
        odd = next((k for k, shape in enumerate(shapes) if shape != shapes[0]), None)
        if odd is not None:
            raise ConversionError(f"calibration: input {name!r} has shape {list(shapes[odd])} in "
                                  f"sample {odd}, {list(shapes[0])} in sample 0")
        stacked[name] = np.stack(arrays)
    return stacked
