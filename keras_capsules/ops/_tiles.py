"""Kernel tiles of a capsule grid: their sizes, padding, extraction and folds.

Everything private about the `kernel_size` windows ("tiles") of a grid,
on checked arguments: the output size and "same" padding of a
convolution or tiling (TensorFlow's conventions), computed from static
shapes in Python once per layer or op call as a `Tiling`; the constant
padding that `torch.compile` can trace; and the machinery behind
`patches.extract_capsule_patches` and `patches.fold_capsule_patches`,
shared with EM routing. Convolutions, the patch ops and EM routing all
pad and count positions through here, so they agree.

Folds and strided tilings take and give tiles in either of two orders,
objects that know their axes: `OFFSETS_LAST`, `(batch, out_h, out_w,
kernel_h, kernel_w, channels)` as `extract_capsule_patches` gives them,
and `OFFSETS_FIRST`, `(kernel_h, kernel_w, *leading, out_h, out_w,
channels)`, in which the children-first EM layout needs no transpose and
the batch (among the leading axes) is never merged with another axis.

Constants are built from Keras ops, not NumPy: under `torch.compile`
(`jit_compile=True` on PyTorch) NumPy arrays turned into tensors break the
graph, and a break inside the routing loop sends the whole loop back to
eager execution. XLA folds these small computations into constants.
"""

import collections
import math

import keras
import numpy as np
from keras import ops

from keras_capsules.ops._backend import pads_by_concatenation

# Everything about tiling a grid into kernel windows, computed once by
# `tiling` and handed down, so that no helper re-derives the output size
# or the padding from the arguments again.
Tiling = collections.namedtuple(
    "Tiling",
    ["grid_size", "kernel_size", "strides", "padding", "out_size", "pads"],
)


def conv_output_length(size, kernel, stride, padding):
    """Output length of a convolution along one axis (0 if none).

    `"same"` follows the TensorFlow convention, `ceil(size / stride)`; an
    unknown size stays `None`.
    """
    if size is None:
        return None
    if padding == "same":
        return -(-size // stride)
    return max(size - kernel, -1) // stride + 1


def conv_output_size(spatial_shape, kernel_size, strides, padding, owner=None):
    """Output `(height, width)` of a convolution or tiling.

    Raises if the kernel leaves no output positions; a layer passes its
    class name as `owner` for the message.
    """
    sizes = tuple(
        conv_output_length(size, kernel, stride, padding)
        for size, kernel, stride in zip(spatial_shape, kernel_size, strides)
    )
    if 0 in sizes:
        if owner is None:
            where = (
                f"A kernel_size of {tuple(kernel_size)} leaves no output "
                f"positions on a grid of size {tuple(spatial_shape)}"
            )
        else:
            where = (
                f"The kernel_size of {owner} leaves no output positions on "
                f"an input of height and width {tuple(spatial_shape)}"
            )
        raise ValueError(
            f'{where} with padding="valid". Use a smaller kernel_size or '
            f'padding="same". Received: kernel_size={tuple(kernel_size)}'
        )
    return sizes


def tiling_sizes(grid_size, kernel_size, strides, padding):
    """Output size and `(top, bottom, left, right)` padding of a tiling.

    `"same"` pads as TensorFlow does: the odd row or column at the end.
    """
    out = conv_output_size(grid_size, kernel_size, strides, padding)
    pads = []
    for size, count, kernel, stride in zip(
        grid_size, out, kernel_size, strides
    ):
        total = 0
        if padding == "same":
            total = max((count - 1) * stride + kernel - size, 0)
        pads += [total // 2, total - total // 2]
    return out, tuple(pads)


def tiling(grid_size, kernel_size, strides, padding):
    """The `Tiling` of checked arguments (pairs of ints, "valid"/"same")."""
    out_size, pads = tiling_sizes(grid_size, kernel_size, strides, padding)
    return Tiling(
        tuple(grid_size),
        tuple(kernel_size),
        tuple(strides),
        padding,
        tuple(out_size),
        pads,
    )


def pad(x, pad_width, constant_values=0.0):
    """`keras.ops.pad(x, pad_width, constant_values=constant_values)`,
    written as a concatenation where `_backend.pads_by_concatenation`
    says so (PyTorch, whose shapes are always concrete)."""
    if not pads_by_concatenation(x):
        return ops.pad(x, pad_width, constant_values=constant_values)
    for axis, (before, after) in enumerate(pad_width):
        if before or after:
            x = ops.concatenate(
                _filler(x, axis, before, constant_values)
                + [x]
                + _filler(x, axis, after, constant_values),
                axis=axis,
            )
    return x


def _filler(x, axis, width, value):
    """`[block]` of `width` entries of `value` along `axis`; `[]` if 0."""
    if not width:
        return []
    shape = list(x.shape)
    shape[axis] = width
    return [ops.full(shape, value, x.dtype)]


class OffsetsLast:
    """Tiles `(batch, out_h, out_w, kernel_h, kernel_w, channels)`."""

    offset_axis = 3
    # The output-position and kernel-offset axes: every entry of a channel.
    window_axes = (1, 2, 3, 4)

    def spread_offsets(self, tiles, geometry, fill):
        """`(u, v, spread)` for every kernel offset: the tiles of offset
        `(u, v)` spread onto the stride grid, `(batch, spread_h, spread_w,
        channels)`.

        The tiles are spread once, the other axes merged into the
        channels (TensorFlow pads tensors of rank 8 at most), and each
        offset is then one slice.
        """
        (kernel_h, kernel_w), channels = geometry.kernel_size, tiles.shape[-1]
        spread_h, spread_w = spread_size(geometry)
        spread = ops.reshape(
            tiles, (-1,) + geometry.out_size + (kernel_h * kernel_w * channels,)
        )
        spread = _dilate(spread, geometry.strides, fill)
        spread = ops.reshape(
            spread[:, :spread_h, :spread_w],
            (-1, spread_h, spread_w, kernel_h, kernel_w, channels),
        )
        for u in range(kernel_h):
            for v in range(kernel_w):
                yield u, v, spread[:, :, :, u, v]


class OffsetsFirst:
    """Tiles `(kernel_h, kernel_w, *leading, out_h, out_w, channels)`.

    The leading axes (the batch, and axes that travel with it, such as
    EM routing's input types) are never merged with the kernel or grid
    axes: under data parallelism the batch axis stays split over the
    devices, where a reshape that merged it behind another axis would
    make XLA gather the whole batch on every device.
    """

    offset_axis = 0
    window_axes = (0, 1, -3, -2)

    def spread_offsets(self, tiles, geometry, fill):
        """`(u, v, spread)` for every kernel offset: the tiles of offset
        `(u, v)` spread onto the stride grid, `(*leading, spread_h,
        spread_w, channels)`, one offset at a time."""
        kernel_h, kernel_w = geometry.kernel_size
        spread_h, spread_w = spread_size(geometry)
        for u in range(kernel_h):
            for v in range(kernel_w):
                spread = _dilate(tiles[u, v], geometry.strides, fill)
                yield u, v, spread[_grid_index(spread, spread_h, spread_w)]


OFFSETS_LAST = OffsetsLast()
OFFSETS_FIRST = OffsetsFirst()


def extract_tiles(inputs, geometry):
    """`extract_capsule_patches` of checked inputs, by a `Tiling`:
    `(batch, out_h, out_w, kernel_h, kernel_w, ...)`."""
    shape = tuple(inputs.shape)
    (height, width), kernel_size = geometry.grid_size, geometry.kernel_size
    trailing = shape[3:]
    (out_h, out_w) = geometry.out_size
    pad_top, pad_bottom, pad_left, pad_right = geometry.pads
    channels = math.prod(trailing)

    x = ops.reshape(inputs, (-1, height, width, channels))
    x = ops.transpose(x, (0, 3, 1, 2))
    x = ops.reshape(x, (-1, height, width, 1))
    if pad_top or pad_bottom or pad_left or pad_right:
        x = pad(
            x, ((0, 0), (pad_top, pad_bottom), (pad_left, pad_right), (0, 0))
        )
    x = ops.image.extract_patches(
        x,
        size=kernel_size,
        strides=geometry.strides,
        padding="valid",
        data_format="channels_last",
    )
    x = ops.reshape(
        x, (-1, channels, out_h, out_w, kernel_size[0], kernel_size[1])
    )
    x = ops.transpose(x, (0, 2, 3, 4, 5, 1))
    return ops.reshape(
        x, (-1, out_h, out_w, kernel_size[0], kernel_size[1]) + trailing
    )


def coverage_counts(geometry, dtype):
    """How many tiles of the `Tiling` contain each grid position: `(1,
    height, width, 1)`, the fold of all-ones tiles."""
    ones = ops.ones(
        (1,) + geometry.out_size + geometry.kernel_size + (1,), dtype
    )
    return fold_tiles(ones, geometry, "sum", OFFSETS_LAST)


def spread_size(geometry):
    """`(spread_h, spread_w)`: the rows and columns of the stride grid
    that the output positions of a `Tiling` span."""
    (out_h, out_w), (stride_h, stride_w) = geometry.out_size, geometry.strides
    return (out_h - 1) * stride_h + 1, (out_w - 1) * stride_w + 1


def fold_tiles(tiles, geometry, reduction, order):
    """`fold_capsule_patches` of tiles with one channel axis, in `order`
    (`OFFSETS_LAST` or `OFFSETS_FIRST`), by a `Tiling`: `(batch, height,
    width, channels)` (`OFFSETS_FIRST`: `(*leading, height, width,
    channels)`).
    """
    grid_size = geometry.grid_size
    pad_top, pad_bottom, pad_left, pad_right = geometry.pads
    padded_h = grid_size[0] + pad_top + pad_bottom
    padded_w = grid_size[1] + pad_left + pad_right
    # For "max", shifted-in filler must never win against a real entry, so
    # it is the most negative finite value of the dtype (never -inf, whose
    # product with a zero mask would be NaN).
    fill = 0.0 if reduction == "sum" else _lowest_finite(tiles.dtype)
    spread_h, spread_w = spread_size(geometry)

    # Each kernel offset's tiles, spread onto the stride grid, are one pad
    # away from their place on the padded grid.
    folded = None
    for u, v, spread in order.spread_offsets(tiles, geometry, fill):
        leading = [(0, 0)] * (len(spread.shape) - 3)
        x = pad(
            spread,
            leading
            + [
                (u, padded_h - u - spread_h),
                (v, padded_w - v - spread_w),
                (0, 0),
            ],
            constant_values=fill,
        )
        if folded is None:
            folded = x
        elif reduction == "sum":
            folded = folded + x
        else:
            folded = ops.maximum(folded, x)
    folded = folded[
        _grid_index(
            folded,
            grid_size[0],
            grid_size[1],
            start_h=pad_top,
            start_w=pad_left,
        )
    ]
    if reduction == "max":
        covered = coverage_counts(geometry, folded.dtype)
        folded = ops.where(covered > 0, folded, ops.zeros_like(folded))
    return folded


def tile_by_slices(x, geometry, order):
    """The tiles of `(*leading, height, width, channels)` by a `Tiling`,
    in `order`, as one strided slice per kernel offset (`OFFSETS_LAST`
    takes one leading axis, the batch).

    For the small child-level tensors of the overlapping EM
    normalisations: their gradient is then a pad per offset, where the
    convolution behind `keras.ops.image.extract_patches` has the input
    gradient of a strided convolution, which XLA runs slowly on CPU.
    """
    kernel_size, strides = geometry.kernel_size, geometry.strides
    pad_top, pad_bottom, pad_left, pad_right = geometry.pads
    if pad_top or pad_bottom or pad_left or pad_right:
        x = pad(
            x,
            [(0, 0)] * (len(x.shape) - 3)
            + [(pad_top, pad_bottom), (pad_left, pad_right), (0, 0)],
        )
    span_h, span_w = spread_size(geometry)
    rows = []
    for u in range(kernel_size[0]):
        row = [
            x[_grid_index(x, span_h, span_w, u, v, strides)]
            for v in range(kernel_size[1])
        ]
        rows.append(ops.stack(row, axis=order.offset_axis))
    return ops.stack(rows, axis=order.offset_axis)


def _grid_index(x, height, width, start_h=0, start_w=0, strides=(1, 1)):
    """The index of `x[..., start_h : start_h + height : stride_h,
    start_w : start_w + width : stride_w, :]`, the grid axes third and
    second from last, written out (every backend and symbolic tensors
    take it)."""
    return (slice(None),) * (len(x.shape) - 3) + (
        slice(start_h, start_h + height, strides[0]),
        slice(start_w, start_w + width, strides[1]),
        slice(None),
    )


def _dilate(x, strides, fill):
    """Spreads `(*leading, h, w, channels)` to a stride grid, `fill` in
    between; no leading axis is merged with another."""
    if strides == (1, 1):
        return x
    *leading, h, w, channels = x.shape
    x = ops.expand_dims(ops.expand_dims(x, -2), -4)
    x = pad(
        x,
        [(0, 0)] * len(leading)
        + [(0, 0), (0, strides[0] - 1), (0, 0), (0, strides[1] - 1), (0, 0)],
        constant_values=fill,
    )
    leading = tuple(-1 if size is None else size for size in leading)
    return ops.reshape(x, leading + (h * strides[0], w * strides[1], channels))


def _lowest_finite(dtype):
    dtype = keras.backend.standardize_dtype(dtype)
    if dtype == "bfloat16":
        # NumPy has no bfloat16; its range is float32's up to rounding, so
        # a value just inside float32's lowest is safe.
        return -3.38e38
    return float(np.finfo(dtype).min)
