"""The benchmark's models: the onnx package's light architectures with seeded random weights.

Randomized files are big (VGG-19 is 575 MB) and take seconds to draw, so they are cached outside
git, in $QCONVERT_BENCH_CACHE or ~/.cache/qconvert-bench. A file's name carries the seed and a
digest of the randomizer's source and the onnx version, so a change to either regenerates it.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # tests.models.randomize lives in the repository, not the package
    sys.path.insert(0, str(ROOT))

from tests.models import randomize  # noqa: E402

MODELS = list(randomize.LIGHT_MODELS)  # short names, in the order of the table
DEFAULT_SEED = 0


def cache_dir() -> Path:
    """Where randomized models are kept (created on demand)."""
    default = Path.home() / ".cache" / "qconvert-bench"
    path = Path(os.environ.get("QCONVERT_BENCH_CACHE", default))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _digest() -> str:
    """Changes whenever the randomized bytes could: the randomizer's source, the onnx version."""
    h = hashlib.sha256(Path(randomize.__file__).read_bytes())
    h.update(onnx.__version__.encode())
    return h.hexdigest()[:10]


def model_path(name: str, seed: int = DEFAULT_SEED) -> Path:
    """Path of the randomized model `name` (a short name from MODELS); generated if missing."""
    if name not in randomize.LIGHT_MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    path = cache_dir() / f"{name}-seed{seed}-{_digest()}.onnx"
    if not path.exists():
        for stale in path.parent.glob(f"{name}-seed{seed}-*.onnx"):  # an older randomizer's
            stale.unlink()
        _write_atomically(path, randomize.load_randomized(name, seed).SerializeToString())
    return path


def _write_atomically(path: Path, data: bytes) -> None:
    """Temporary file then rename: an interrupted run never leaves a truncated cached model."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".onnx", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def weight_bytes(model: onnx.ModelProto) -> int:
    """Sum of the initializers' sizes in bytes (element count times element size)."""
    total = 0
    for tensor in model.graph.initializer:
        count = 1
        for d in tensor.dims:
            count *= d
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        total += count * itemsize
    return total
