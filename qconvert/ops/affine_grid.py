"""AffineGrid (opset 20): the sampling grid of a batch of affine matrices, for GridSample.

With a constant size (N, C, H, W) (or (N, C, D, H, W)), the grid is the product of a constant
base grid, one row (x, y[, z], 1) per output position in the [-1, 1] coordinates align_corners
picks, with each transposed theta [N, 2, 3] (or [N, 3, 4]): one BATCH_MATMUL, RESHAPEd to
[N, H, W, 2] (or [N, D, H, W, 3]). A size computed at run time would make the grid's shape
data-dependent.
"""

from __future__ import annotations

import numpy as np

from .layout import reshape, transpose
from .registry import onnx_op


def base_grid(sizes, align_corners: bool) -> np.ndarray:
    """[prod(sizes), r + 1]: the normalised coordinates of every position of the spatial `sizes`
    (D, H, W order; x along the last axis varies fastest), x first, then y (and z), then 1."""
    axes = []
    for n in sizes:
        if align_corners:
            axes.append(np.linspace(-1.0, 1.0, n))
        else:
            axes.append((2 * np.arange(n) + 1) / n - 1)
    mesh = np.meshgrid(*axes, indexing="ij")
    columns = [m.reshape(-1) for m in reversed(mesh)] + [np.ones(int(np.prod(sizes)))]
    return np.stack(columns, axis=1).astype(np.float32)


@onnx_op("AffineGrid")
def import_affine_grid(node, ctx):
    theta, size = node.inputs[:2]
    y = node.outputs[0]
    if ctx.dtype(theta) != np.float32:
        raise ctx.error(f"theta {theta!r} has dtype {ctx.dtype(theta)}; float32 is supported")
    value = ctx.require_const(size, "size", "the grid's shape follows from it, so it must be a constant "
                              "(make it an initializer)")
    sizes = [int(s) for s in np.ravel(value)]
    rank = len(sizes) - 2
    batch = ctx.shape(theta)[0] if ctx.rank(theta) == 3 else -1
    if rank not in (2, 3) or ctx.shape(theta) != (sizes[0], rank, rank + 1) or min(sizes) < 1:
        raise ctx.error(f"theta {list(ctx.shape(theta))} with size {sizes}: expected theta [N, 2, 3] with "
                        "size (N, C, H, W) or theta [N, 3, 4] with size (N, C, D, H, W)")
    align_corners = bool(node.attr("align_corners", 0))
    if align_corners and 1 in sizes[2:]:
        raise ctx.error(f"align_corners with a spatial size of 1 (size {sizes}) is not supported: ONNX's "
                        "reference, onnxruntime and PyTorch place its one sample differently (-1, 1, 0)")
    grid = base_grid(sizes[2:], align_corners)
    points = grid.shape[0]
    flat = ctx.tensor(y + "_flat", (batch, points, rank), np.float32)
    ctx.add_op("BATCH_MATMUL", [ctx.constant("base_grid", grid[None]), transpose(ctx, theta, (0, 2, 1))],
               [flat])
    reshape(ctx, flat, (batch,) + tuple(sizes[2:]) + (rank,), y)
