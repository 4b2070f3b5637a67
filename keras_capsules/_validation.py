"""Private argument checks: one `check_*` function per kind of argument,
`normalize_*` for arguments given in more than one form (an int or a pair,
any letter case), and `broadcasts_to` for shapes.

Ops, layers, losses, callbacks, models and datasets share these so that an
argument is checked, and its error worded, the same way wherever it
appears: a `ValueError` or `TypeError` naming the argument and what was
expected, ending `Received: name=value`. Nothing here is re-exported.
"""

import math
import os

import numpy as np

_PADDINGS = ("valid", "same")


def _subject(name, owner):
    # Layers, ops, losses and models raise from their own call, so the
    # traceback names them; a dataset function also names itself, as its
    # checks run inside a pipeline builder.
    if owner is None:
        return f"Argument {name}"
    return f"`{owner}`: argument `{name}`"


def _is_int(value):
    return not isinstance(value, bool) and isinstance(value, (int, np.integer))


def _is_number(value):
    return not isinstance(value, bool) and isinstance(
        value, (int, float, np.integer, np.floating)
    )


def check_positive_int(value, name, owner=None):
    """Returns `value` as an int; raises unless it is a positive integer."""
    if not _is_int(value) or value < 1:
        raise ValueError(
            f"{_subject(name, owner)} must be a positive integer. "
            f"Received: {name}={value}"
        )
    return int(value)


def check_int(value, name, minimum=0, allow_none=False, owner=None):
    """Returns `value` (an int `>= minimum`, or `None` where allowed)."""
    if value is None and allow_none:
        return None
    if not _is_int(value) or value < minimum:
        expected = f"an integer >= {minimum}"
        if allow_none:
            expected = f"None or {expected}"
        raise ValueError(
            f"{_subject(name, owner)} must be {expected}. "
            f"Received: {name}={value}"
        )
    return int(value)


def check_axis(axis, rank, name="axis"):
    """Returns `axis` as a non-negative int; raises unless it is an axis
    of a tensor of rank `rank`, `-rank <= axis < rank`."""
    if not _is_int(axis):
        raise TypeError(
            f"Argument {name} must be an integer. Received: {name}={axis!r}"
        )
    if not -rank <= axis < rank:
        raise ValueError(
            f"Argument {name} must be an axis of the input, of rank {rank}: "
            f"an integer in [{-rank}, {rank - 1}]. Received: {name}={axis}"
        )
    return int(axis) % rank


def check_bool(value, name, allow_none=False, owner=None):
    """Returns `value`; raises `TypeError` unless it is a bool (or None)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, bool):
        expected = "None or a boolean" if allow_none else "a boolean"
        raise TypeError(
            f"{_subject(name, owner)} must be {expected}. "
            f"Received: {name}={value}"
        )
    return value


def check_path(value, name, owner=None):
    """Returns `value`; raises `TypeError` unless it is None or a path."""
    if value is not None and not isinstance(value, (str, os.PathLike)):
        raise TypeError(
            f"{_subject(name, owner)} must be None or a path. "
            f"Received: {name}={value}"
        )
    return value


def check_non_negative_number(value, name, owner=None):
    """Returns `value`; `TypeError` unless a Python number, `ValueError`
    unless finite and `>= 0`."""
    if not _is_number(value):
        raise TypeError(
            f"{_subject(name, owner)} must be a Python number. "
            f"Received: {name}={value!r}"
        )
    if not math.isfinite(value) or value < 0:
        raise ValueError(
            f"{_subject(name, owner)} must be a finite non-negative number. "
            f"Received: {name}={value}"
        )
    return value


def check_positive_number(value, name, allow_none=False):
    """Returns `value` as a float (or `None`, where allowed)."""
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not value > 0
        or not math.isfinite(value)
    ):
        expected = "a finite positive number"
        if allow_none:
            expected = "None or a finite positive number"
        raise ValueError(
            f"Argument {name} must be {expected}. Received: {name}={value}"
        )
    return float(value)


def check_image_values(images, name, owner=None, value_range=None):
    """Raises `ValueError` if the NumPy array `images` holds NaN or
    +-inf, or, with `value_range=(low, high)`, a value outside it.

    Integer arrays are always finite; only their range is checked. The
    first non-finite value is named by its index, so that one bad pixel
    in a large batch can be found.
    """
    images = np.asarray(images)
    if np.issubdtype(images.dtype, np.inexact):
        finite = np.isfinite(images)
        if not finite.all():
            # argmin of the mask is the flat index of the first False.
            index = np.unravel_index(np.argmin(finite), finite.shape)
            where = ", ".join(str(int(i)) for i in index)
            raise ValueError(
                f"{_subject(name, owner)} must hold finite values, but "
                f"{images.size - int(finite.sum())} of its {images.size} "
                f"values are NaN or infinite. "
                f"Received: {name}[{where}]={images[index]}"
            )
    if value_range is None or images.size == 0:
        return images
    low, high = value_range
    minimum, maximum = images.min(), images.max()
    if minimum < low or maximum > high:
        hint = ""
        if (low, high) == (0, 1) and minimum >= 0 and maximum <= 255:
            hint = " (images of 0..255 values: divide them by 255)"
        raise ValueError(
            f"{_subject(name, owner)} must hold values in [{low}, {high}]"
            f"{hint}. Received: {name}.min()={minimum}, "
            f"{name}.max()={maximum}"
        )
    return images


def check_option(value, name, options, owner=None):
    """Returns `value`; raises unless it is one of the strings `options`."""
    if value not in options:
        raise _option_error(value, name, options, owner)
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


def check_no_input_shape(kwargs, owner):
    """Raises if `kwargs` holds `input_shape`, which `keras.Model` would
    take silently (a legacy argument of Keras layers) while the model was
    built for its default `image_shape`."""
    if "input_shape" in kwargs:
        raise TypeError(
            f"{owner} takes the shape of its images as image_shape, not "
            f"input_shape. Received: input_shape={kwargs['input_shape']}"
        )


def check_image_shape(image_shape):
    """Returns a model's `(height, width, channels)` as a tuple."""
    return check_int_tuple(
        image_shape,
        "image_shape",
        length=3,
        meaning=" (height, width, channels), channels last",
    )


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


def _option_error(value, name, options, owner=None):
    expected = " or ".join(f'"{option}"' for option in options)
    return ValueError(
        f"{_subject(name, owner)} must be {expected}. Received: {name}={value}"
    )


def broadcasts_to(shape, target):
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def check_votes_rank(votes_shape, last_axis="dim"):
    """Raises unless votes have rank >= 3, `(..., num_in, num_out, ...)`."""
    if len(votes_shape) < 3:
        raise ValueError(
            "Argument votes must have rank >= 3, with shape "
            f"(..., num_in, num_out, {last_axis}). "
            f"Received: votes.shape={tuple(votes_shape)}"
        )


def check_broadcasts(shape, target, name, what):
    """Raises unless `shape` broadcasts to the static `target` shape, the
    shape of `what`; shapes with unknown sizes pass."""
    if None in target or None in shape:
        return
    if not broadcasts_to(shape, target):
        raise ValueError(
            f"Argument {name} must broadcast to the shape of {what} "
            f"{target}. Received: {name}.shape={shape}"
        )


def check_int_tuple(value, name, length=None, allow_none=False, meaning=""):
    """Returns `value` as a tuple of positive ints (or `None` where
    allowed); `meaning` ends the message, such as `", one per
    convolution"`."""
    if value is None and allow_none:
        return None
    if (
        not isinstance(value, (tuple, list))
        or not value
        or (length is not None and len(value) != length)
        or not all(_is_int(v) and v > 0 for v in value)
    ):
        size = f"{length} " if length is not None else ""
        expected = f"a tuple of {size}positive integers{meaning}"
        if allow_none:
            expected = f"None or {expected}"
        raise ValueError(
            f"Argument {name} must be {expected}. Received: {name}={value!r}"
        )
    return tuple(int(v) for v in value)


def check_num_objects(num_objects, num_classes):
    """Returns `num_objects`: a positive int, at most `num_classes`."""
    check_positive_int(num_objects, "num_objects")
    if num_objects > num_classes:
        raise ValueError(
            "Argument num_objects must be at most num_classes "
            f"({num_classes}): the objects of an image are of different "
            f"classes. Received: num_objects={num_objects}"
        )
    return num_objects


def check_image_size(image_shape, convolutions, network):
    """Raises unless unpadded convolutions leave a position on the images.

    Args:
        image_shape: `(height, width, channels)`.
        convolutions: `(description, kernel_size, strides)` for each
            convolution in order, all with valid padding.
        network: The name of the network, for the message.
    """
    size = min(image_shape[:2])
    for _, kernel_size, strides in convolutions:
        size = (size - kernel_size) // strides + 1 if size >= kernel_size else 0
    if size >= 1:
        return
    smallest = 1
    for _, kernel_size, strides in reversed(convolutions):
        smallest = (smallest - 1) * strides + kernel_size
    layers = ", ".join(
        f"{description} ({kernel_size}x{kernel_size}, stride {strides})"
        for description, kernel_size, strides in convolutions
    )
    raise ValueError(
        f"The images are too small for {network}: {layers}, all without "
        f"padding, need a height and width of at least {smallest}. Use "
        f"larger images or smaller kernels. Received: image_shape="
        f"{image_shape}"
    )


def check_pose_params(shape, name):
    """Raises unless `shape` is `(..., 6)`, six pose parameters."""
    if len(shape) < 1 or shape[-1] != 6:
        raise ValueError(
            f"Argument {name} must have shape (..., 6). "
            f"Received: {name}.shape={tuple(shape)}"
        )
