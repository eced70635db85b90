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

__version__ = "0.1.0"
__all__ = ["BelowThreshold", "Conversion", "ConversionError", "FakeQuant", "UsageError", "convert",
           "fake_quant", "__version__"]


class Conversion(NamedTuple):
    """What convert returns (unpacks as `tflite, report = qconvert.convert(...)`)."""

    tflite: bytes  # the TFLite flatbuffer, as a .tflite file holds it
    report: Any  # converter.ConversionReport: .as_dict() is the CLI's --json, .summary() its line


def convert(model, *, input_shapes: Mapping | None = None, io_layout: str = "nhwc",
            quantize: bool = False, calibration=None, calibration_samples: int | None = None,
            calibration_method: str | None = None, default_range=None, io_type: str | None = None,
            activations: str | None = None, per_tensor_fc: bool = False, weight_only: bool = False,
            weight_only_min_elements: int | None = None, float16: bool = False,
            keep_float=(), target_sqnr: float | None = None, target: str | None = None) -> Conversion:
    """Converts an ONNX model to a TFLite flatbuffer, as `qconvert IN.onnx OUT.tflite` does.

    `model`: a path (str or os.PathLike), the bytes of an .onnx file, or an onnx.ModelProto (not
    modified; external data of bytes or a ModelProto is looked up from the current directory).

    `calibration` (with quantize=True): a path (an .npz or a directory, as --calibration); a dict
    {input name: array}, laid out as an .npz's arrays (first axis = samples); or an iterable of
    samples, each a dict {input name: array in the input's shape}, like TFLiteConverter's
    representative_dataset (a function returning one is called). An iterable is read up to
    `calibration_samples` samples, and at most limits.CALIBRATION_SAMPLES.

    The other keywords are the command line's flags (`input_shapes={"x": (1, 3, 224, 224)}` is
    --input-shape x:1,3,224,224; `default_range=(-6, 6)` or "-6,6"; `keep_float` a pattern or a
    list of them), with the same defaults, checks and messages. The CLI's verification (--verify,
    --min-sqnr, --report) is not run: `qconvert verify` does that for any .tflite.

    Returns Conversion(tflite=bytes, report=ConversionReport). Raises UsageError for malformed or
    contradictory arguments and ConversionError when the model or the data cannot be converted,
    with the messages the command line prints.
    """
    from .converter import convert as convert_source

    source, data = _model_source(model)
    arguments = _arguments(
        input_shapes=input_shapes, io_layout=io_layout, quantize=quantize, calibration=calibration,
        calibration_samples=calibration_samples, calibration_method=calibration_method,
        default_range=default_range, io_type=io_type, activations=activations,
        per_tensor_fc=per_tensor_fc, weight_only=weight_only,
        weight_only_min_elements=weight_only_min_elements, float16=float16, keep_float=keep_float,
        target_sqnr=target_sqnr, target=target)
    flatbuffer, report = convert_source(source, data=data, output_name="<bytes>", **arguments)
    return Conversion(bytes(flatbuffer), report)


class FakeQuant(NamedTuple):
    """What fake_quant returns (unpacks as `onnx_bytes, report = qconvert.fake_quant(...)`)."""

    onnx: bytes  # the fake-quant ONNX model, as an .onnx file holds it
    report: Any  # converter.FakeQuantReport: .as_dict() is the CLI's --json, .summary() its line


def fake_quant(model, *, calibration=None, input_shapes: Mapping | None = None,
               calibration_samples: int | None = None, calibration_method: str | None = None,
               default_range=None, activations: str | None = None, per_tensor_fc: bool = False,
               keep_float=(), target_sqnr: float | None = None, target: str | None = None) -> FakeQuant:
    """The fake-quant ONNX model, as `qconvert fakequant IN.onnx OUT.onnx` writes it: Q/DQ pairs
    where the int8 conversion with these options quantizes, holding its params (qdq/fakequant.py).
    Arguments as convert's with quantize=True."""
    from .converter import fake_quant as fake_quant_source

    source, data = _model_source(model)
    arguments = _arguments(input_shapes=input_shapes, quantize=True, calibration=calibration,
                           calibration_samples=calibration_samples, calibration_method=calibration_method,
                           default_range=default_range, activations=activations,
                           per_tensor_fc=per_tensor_fc, keep_float=keep_float, target_sqnr=target_sqnr,
                           target=target)
    del arguments["weights"]
    written, report = fake_quant_source(source, data=data, output_name="<bytes>", **arguments)
    return FakeQuant(written, report)


def _arguments(*, input_shapes, calibration, calibration_samples, default_range, keep_float,
               **flags) -> dict:
    """converter.convert's keyword arguments for the API's keywords, checked as the command
    line checks its flags (click's usage errors become UsageError)."""
    import click

    from . import cli

    if calibration is not None:
        calibration = _calibration_source(calibration, calibration_samples)
    try:
        flags = cli.typed_like_flags(dict(calibration_samples=calibration_samples, **flags))
        return cli.conversion_arguments(
            input_shapes=_shape_flags(input_shapes), calibration=calibration,
            default_range=_range_flag(default_range),
            keep_float=(keep_float,) if isinstance(keep_float, str) else tuple(keep_float), **flags)
    except click.UsageError as e:
        raise UsageError(e.format_message()) from None


def _model_source(model) -> tuple[str, bytes | None]:
    """converter.convert's (source, data) for convert's `model`."""
    if isinstance(model, (str, os.PathLike)):
        path = os.fsdecode(os.fspath(model))
        from .files import check_input_file

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


def _shape_flags(shapes) -> tuple[str, ...]:
    """{name: dims} as --input-shape values, checked by the flag's parser."""
    if shapes is None:
        return ()
    if not isinstance(shapes, Mapping):
        raise UsageError(f"input_shapes: expected a dict {{input name: dims}}, not {type(shapes).__name__}")
    try:
        return tuple(f"{name}:{','.join(str(d) for d in dims)}" for name, dims in shapes.items())
    except TypeError:
        raise UsageError("input_shapes: every value must be a sequence of dimensions") from None


def _range_flag(value) -> str | None:
    """default_range (MIN, MAX) as the --default-range text, checked by the flag's parser."""
    if value is None or isinstance(value, str):
        return value
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise UsageError(f"default_range: expected (MIN, MAX) or 'MIN,MAX', not {value!r}") from None
    return f"{low!r},{high!r}"


def _calibration_source(calibration, count: int | None):
    """A path (str) or a dict {input name: array} for converter.convert's `calibration`."""
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
    ...] array}: the layout calibration_data checks. Reading stops at limits.CALIBRATION_SAMPLES,
    so an endless generator ends in an error naming the limit."""
    import numpy as np

    from .limits import CALIBRATION_SAMPLES

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
