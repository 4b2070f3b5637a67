"""2-D convolutions whose gradients stay fast under XLA on CPU."""

from keras import ops

from keras_capsules._validation import normalize_padding
from keras_capsules._validation import normalize_pair
from keras_capsules.ops._backend import rewrites_strided_conv
from keras_capsules.ops._tiles import pad
from keras_capsules.ops._tiles import tiling_sizes


def conv2d(inputs, kernel, strides=1, padding="valid"):
    """2-D convolution, channels last, computed stride-free when strided.

    Same result as `keras.ops.conv(inputs, kernel, strides, padding)`. A
    strided convolution is rewritten as a stride-1 convolution on a
    space-to-depth view of the input (each `strides` block of pixels folded
    into the channels) with the kernel zero-padded to a multiple of the
    stride and folded the same way, so that its gradient with respect to
    the input needs no lhs-dilated convolution (docs/performance.md,
    "CapsNet: the strided convolution"). On PyTorch, and when the spatial
    size is unknown, the plain `keras.ops.conv` is used.

    Args:
        inputs: Tensor of shape `(batch, height, width, channels)`.
        kernel: Tensor of shape `(kernel_h, kernel_w, channels, filters)`.
        strides: Integer or pair of integers. Defaults to `1`.
        padding: `"valid"` or `"same"` (TensorFlow's convention: extra
            padding at the bottom/right). Defaults to `"valid"`.

    Returns:
        Tensor of shape `(batch, out_h, out_w, filters)`.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> x = np.random.rand(2, 20, 20, 8).astype("float32")
    >>> w = np.random.rand(9, 9, 8, 16).astype("float32")
    >>> tuple(keras_capsules.ops.conv2d(x, w, strides=2).shape)
    (2, 6, 6, 16)
    """
    strides = normalize_pair(strides, "strides")
    padding = normalize_padding(padding)
    if strides == (1, 1) or not rewrites_strided_conv(inputs):
        return ops.conv(inputs, kernel, strides=strides, padding=padding)
    height, width = inputs.shape[1], inputs.shape[2]
    kernel_size = tuple(kernel.shape[:2])
    (out_h, out_w), (top, bottom, left, right) = tiling_sizes(
        (height, width), kernel_size, strides, padding
    )
    if padding == "same":
        inputs = pad(inputs, [[0, 0], [top, bottom], [left, right], [0, 0]])
        height, width = height + top + bottom, width + left + right
    folded_kernel = _space_to_depth_kernel(kernel, strides)
    blocks = (folded_kernel.shape[0], folded_kernel.shape[1])
    # Every output needs input rows up to strides * (out - 1) + padded
    # kernel, and the fold needs a multiple of the stride: zero rows beyond
    # the image only ever meet zero-padded kernel taps.
    padded_h = strides[0] * (out_h - 1 + blocks[0])
    padded_w = strides[1] * (out_w - 1 + blocks[1])
    inputs = pad(
        inputs,
        [
            [0, 0],
            [0, max(padded_h - height, 0)],
            [0, max(padded_w - width, 0)],
            [0, 0],
        ],
    )
    inputs = inputs[:, :padded_h, :padded_w, :]
    folded = _space_to_depth(inputs, strides)
    return ops.conv(folded, folded_kernel, strides=1, padding="valid")


def depthwise_conv2d(inputs, kernel, strides=1, padding="valid"):
    """Depthwise 2-D convolution, channels last, fast for a single window.

    Same result as `keras.ops.depthwise_conv(inputs, kernel, strides,
    padding)`: every input channel is filtered by its own
    `depth_multiplier` kernels, output channel `c * depth_multiplier + m`
    coming from channel `c`. When the window fits only once on the input
    (a `"valid"` convolution with a 1x1 output, as in Efficient-CapsNet's
    primary capsules), it is computed as one `keras.ops.einsum` over that
    window instead of a grouped convolution (docs/performance.md,
    "EfficientCapsNet: the depthwise convolution"). Other shapes use
    `keras.ops.depthwise_conv`.

    Args:
        inputs: Tensor of shape `(batch, height, width, channels)`.
        kernel: Tensor of shape `(kernel_h, kernel_w, channels,
            depth_multiplier)`.
        strides: Integer or pair of integers. Defaults to `1`.
        padding: `"valid"` or `"same"`. Defaults to `"valid"`.

    Returns:
        Tensor of shape `(batch, out_h, out_w, channels *
        depth_multiplier)`.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> x = np.random.rand(2, 9, 9, 128).astype("float32")
    >>> w = np.random.rand(9, 9, 128, 1).astype("float32")
    >>> tuple(keras_capsules.ops.depthwise_conv2d(x, w).shape)
    (2, 1, 1, 128)
    """
    strides = normalize_pair(strides, "strides")
    padding = normalize_padding(padding)
    kernel_h, kernel_w, channels, multiplier = kernel.shape
    height, width = inputs.shape[1], inputs.shape[2]
    single_window = (
        padding == "valid"
        and None not in (height, width)
        and kernel_h <= height < kernel_h + strides[0]
        and kernel_w <= width < kernel_w + strides[1]
    )
    if not single_window:
        return ops.depthwise_conv(
            inputs, kernel, strides=strides, padding=padding
        )
    window = inputs[:, :kernel_h, :kernel_w, :]
    outputs = ops.einsum("bhwc,hwcm->bcm", window, kernel)
    return ops.reshape(outputs, (-1, 1, 1, channels * multiplier))


def _space_to_depth(inputs, strides):
    _, height, width, channels = inputs.shape
    sh, sw = strides
    x = ops.reshape(inputs, (-1, height // sh, sh, width // sw, sw, channels))
    x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    return ops.reshape(x, (-1, height // sh, width // sw, sh * sw * channels))


def _space_to_depth_kernel(kernel, strides):
    kernel_h, kernel_w, channels, filters = kernel.shape
    sh, sw = strides
    blocks_h, blocks_w = -(-kernel_h // sh), -(-kernel_w // sw)
    kernel = pad(
        kernel,
        [
            [0, blocks_h * sh - kernel_h],
            [0, blocks_w * sw - kernel_w],
            [0, 0],
            [0, 0],
        ],
    )
    kernel = ops.reshape(
        kernel, (blocks_h, sh, blocks_w, sw, channels, filters)
    )
    kernel = ops.transpose(kernel, (0, 2, 1, 3, 4, 5))
    return ops.reshape(
        kernel, (blocks_h, blocks_w, sh * sw * channels, filters)
    )
