"""Convolution and tiling geometry: output sizes and "same" padding.

Computed from static shapes in Python, once per layer or op call, and
shared by the convolution, the patch ops and EM routing so that every one
of them pads and counts positions the same way (TensorFlow's conventions).
"""

import collections

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


def patch_geometry(grid_size, kernel_size, strides, padding):
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
    out_size, pads = patch_geometry(grid_size, kernel_size, strides, padding)
    return Tiling(
        tuple(grid_size),
        tuple(kernel_size),
        tuple(strides),
        padding,
        tuple(out_size),
        pads,
    )
