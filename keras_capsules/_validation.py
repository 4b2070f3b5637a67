"""Private argument checks, convolution geometry and config helpers.

Ops, layers and models share these so that an argument is checked, and its
error worded, the same way wherever it appears. Nothing here is re-exported.
"""

import keras
import numpy as np

_PADDINGS = ("valid", "same")


def check_positive_int(value, name):
    """Returns `value` as an int; raises unless it is a positive integer."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or value < 1
    ):
        raise ValueError(
            f"Argument {name} must be a positive integer. "
            f"Received: {name}={value}"
        )
    return int(value)


def check_positive_number(value, name, allow_none=False):
    """Returns `value` as a float (or `None`, where allowed)."""
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not value > 0
    ):
        expected = "a positive number"
        if allow_none:
            expected = "None or a positive number"
        raise ValueError(
            f"Argument {name} must be {expected}. Received: {name}={value}"
        )
    return float(value)


def check_option(value, name, options):
    """Returns `value`; raises unless it is one of the strings `options`."""
    if value not in options:
        raise _option_error(value, name, options)
    return value


def normalize_pair(value, name, allow_int=True):
    """Returns `(int, int)` from an int (where allowed) or a pair of ints."""
    pair = (
        (value, value)
        if allow_int and isinstance(value, (int, np.integer))
        else value
    )
    if (
        not isinstance(pair, (tuple, list))
        or len(pair) != 2
        or any(
            isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1
            for v in pair
        )
    ):
        expected = (
            "a positive integer or a tuple of 2 positive integers"
            if allow_int
            else "a tuple of 2 positive integers"
        )
        raise ValueError(
            f"Argument {name} must be {expected}. Received: {name}={value}"
        )
    return (int(pair[0]), int(pair[1]))


def normalize_padding(padding):
    """Returns `"valid"` or `"same"`, accepting any letter case."""
    if isinstance(padding, str) and padding.lower() in _PADDINGS:
        return padding.lower()
    raise _option_error(padding, "padding", _PADDINGS)


def check_image_shape(input_shape):
    """Returns a model's `(height, width, channels)` as a tuple."""
    valid = (
        isinstance(input_shape, (tuple, list))
        and len(input_shape) == 3
        and all(
            isinstance(d, int) and not isinstance(d, bool) and d > 0
            for d in input_shape
        )
    )
    if not valid:
        raise ValueError(
            "Argument input_shape must be a tuple of 3 positive integers "
            "(height, width, channels), channels last. "
            f"Received: input_shape={input_shape!r}"
        )
    return tuple(input_shape)


def check_matrix_capsules_shape(input_shape, owner):
    """Validates `[poses, activations]` shapes; returns them as tuples."""
    expected = (
        f"{owner} expects a list [poses, activations] with poses of shape "
        "(batch, height, width, capsules, pose_size, pose_size) and "
        "activations of shape (batch, height, width, capsules), with static "
        "height, width, capsules and pose_size. "
    )
    if (
        not isinstance(input_shape, (list, tuple))
        or len(input_shape) != 2
        or not all(isinstance(s, (list, tuple)) for s in input_shape)
    ):
        raise ValueError(expected + f"Received: input_shape={input_shape}")
    pose_shape = tuple(input_shape[0])
    activation_shape = tuple(input_shape[1])
    if (
        len(pose_shape) != 6
        or len(activation_shape) != 4
        or any(d is None for d in pose_shape[1:])
        or activation_shape[1:] != pose_shape[1:4]
        or None not in (pose_shape[0], activation_shape[0])
        and pose_shape[0] != activation_shape[0]
    ):
        raise ValueError(expected + f"Received: input_shape={input_shape}")
    if pose_shape[4] != pose_shape[5]:
        raise ValueError(
            f"{owner} expects square pose matrices, such as 4x4. "
            f"Received: input_shape={input_shape}"
        )
    return pose_shape, activation_shape


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


def serialize_objects(layer, *names):
    """Serializes the initializer, regularizer and constraint attributes.

    Returns the `get_config` entries `{name: serialized layer.<name>}`.
    `keras.initializers.serialize`, `keras.regularizers.serialize` and
    `keras.constraints.serialize` all are `serialize_keras_object`.
    """
    return {
        name: keras.saving.serialize_keras_object(getattr(layer, name))
        for name in names
    }


def _option_error(value, name, options):
    expected = " or ".join(f'"{option}"' for option in options)
    return ValueError(
        f"Argument {name} must be {expected}. Received: {name}={value}"
    )


def broadcasts_to(shape, target):
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False
