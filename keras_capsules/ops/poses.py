"""Poses of Stacked Capsule Autoencoders: six numbers to an affine
transform."""

import math

from keras import ops

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_pose_params
from keras_capsules.ops._dtypes import compute_dtypes

_NUM_POSE_PARAMS = 6


def geometric_transform(
    params, similarity=False, nonlinear=True, as_matrix=False
):
    """Turns six pose parameters into a 2-D affine transform.

    The pose parametrisation of Stacked Capsule Autoencoders, as the
    official code writes it. The last axis of `params` holds
    `(scale_x, scale_y, angle, shear, shift_x, shift_y)`. With
    `nonlinear=True` (the official setting for part and object capsules)
    they are first squashed into useful ranges:

    - `scale = sigmoid(raw) + 0.01`, in `(0.01, 1.01)`;
    - `shift = tanh(5 raw)` and `shear = tanh(5 raw)`, in `(-1, 1)`;
    - `angle = 2 pi raw`.

    With `nonlinear=False` the scales are `|raw| + 0.01` and the other
    parameters are used as they are. With `c = cos(angle)` and
    `s = sin(angle)` the transform `[[a, b, tx], [c', d, ty]]` is

    - affine (`similarity=False`):
      `a = sx c + shear sy s`, `b = -sx s + shear sy c`, `c' = sy s`,
      `d = sy c`, so that its determinant is `sx sy` (never below
      `1e-4` with `nonlinear=True`);
    - similarity (`similarity=True`): one scale `sx` and no shear,
      `[[sx c, -sx s, tx], [sx s, sx c, ty]]`.

    Coordinates are those of the canvas normalised to `[-1, 1]` (see
    `keras_capsules.ops.warp_templates`).

    Paper: [Stacked Capsule Autoencoders](https://arxiv.org/abs/1906.06818)
    (Kosiorek, Sabour, Teh & Hinton, NeurIPS 2019).

    Args:
        params: Tensor of shape `(..., 6)`.
        similarity: Boolean, whether to build a similarity transform
            instead of a general affine one. Defaults to `False`.
        nonlinear: Boolean, whether to squash the parameters first.
            Defaults to `True`.
        as_matrix: Boolean, whether to return `3 x 3` homogeneous matrices
            instead of the six numbers `(a, b, tx, c, d, ty)`. Defaults to
            `False`.

    Returns:
        A tensor of shape `(..., 6)`, or `(..., 3, 3)` with
        `as_matrix=True`, in the dtype of `params` (computed in `float32`
        for half-precision inputs).

    Raises:
        ValueError: If the last axis of `params` is not 6.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> params = np.zeros((2, 40, 6), "float32")
    >>> transform = keras_capsules.ops.geometric_transform(params)
    >>> tuple(transform.shape)
    (2, 40, 6)

    Reference:
    - [The official TensorFlow code](
      https://github.com/akosiorek/stacked_capsule_autoencoders)
      (`capsules/math_ops.py`, `geometric_transform`)
    """
    check_bool(similarity, "similarity")
    check_bool(nonlinear, "nonlinear")
    check_bool(as_matrix, "as_matrix")
    params = ops.convert_to_tensor(params)
    check_pose_params(params.shape, "params")
    dtype, compute_dtype = compute_dtypes(params)
    params = ops.cast(params, compute_dtype)
    scale_x, scale_y, angle, shear, shift_x, shift_y = (
        params[..., i : i + 1] for i in range(_NUM_POSE_PARAMS)
    )
    if nonlinear:
        scale_x = ops.sigmoid(scale_x) + 1e-2
        scale_y = ops.sigmoid(scale_y) + 1e-2
        shift_x = ops.tanh(shift_x * 5.0)
        shift_y = ops.tanh(shift_y * 5.0)
        shear = ops.tanh(shear * 5.0)
        angle = angle * (2.0 * math.pi)
    else:
        scale_x = ops.abs(scale_x) + 1e-2
        scale_y = ops.abs(scale_y) + 1e-2
    cos, sin = ops.cos(angle), ops.sin(angle)
    if similarity:
        rows = [
            scale_x * cos,
            -scale_x * sin,
            shift_x,
            scale_x * sin,
            scale_x * cos,
            shift_y,
        ]
    else:
        rows = [
            scale_x * cos + shear * scale_y * sin,
            -scale_x * sin + shear * scale_y * cos,
            shift_x,
            scale_y * sin,
            scale_y * cos,
            shift_y,
        ]
    transform = ops.concatenate(rows, axis=-1)
    if as_matrix:
        batch_shape = tuple(ops.shape(transform)[:-1])
        transform = ops.reshape(transform, batch_shape + (2, 3))
        last_row = ops.zeros_like(
            transform[..., :1, :]
        ) + ops.convert_to_tensor([0.0, 0.0, 1.0], dtype=compute_dtype)
        transform = ops.concatenate([transform, last_row], axis=-2)
    return ops.cast(transform, dtype)
