"""The squash non-linearity of capsule networks (Sabour et al. 2017)."""

import keras
from keras import ops

from keras_capsules._validation import check_positive_number
from keras_capsules.ops._dtypes import compute_dtypes


def squash(x, axis=-1, offset=1.0):
    """Shrinks vectors to a length in `[0, 1)`, keeping their direction.

    Eq. 1 of the paper: short vectors shrink to almost zero length and long
    vectors to a length slightly below 1, so the length of a capsule can be
    read as the probability that the entity it represents is present:

    `v = |s|^2 / (offset + |s|^2) * s / |s|`

    `offset=1.0` is the paper's form; `offset=0.5` gives the steeper
    `|s|^2 / (0.5 + |s|^2)` variant used by several ports. The norm is
    computed as `sqrt(|s|^2 + epsilon)` with `epsilon = keras.config.epsilon()`,
    so the value (0) and the gradient are finite at an exactly-zero vector.
    Half-precision inputs (`float16`, `bfloat16`) are squashed in `float32`
    and cast back, since `|s|^2` overflows `float16` from `|s| ~ 256` on.

    Paper: [Dynamic Routing Between Capsules](
    https://arxiv.org/abs/1710.09829) (Sabour, Frosst & Hinton, 2017).

    Args:
        x: Tensor of capsule vectors, e.g. `(batch, num_capsules,
            capsule_dim)`.
        axis: Integer, the axis that holds the capsule components.
            Defaults to `-1`.
        offset: Positive float, the constant in the denominator of the
            scale. Defaults to `1.0`.

    Returns:
        A tensor with the shape and dtype of `x` (integer inputs become
        `keras.config.floatx()`), whose vectors along `axis` have length in
        `[0, 1)`.

    Raises:
        ValueError: If `offset` is not a positive number.

    Example:

    >>> import keras
    >>> import keras_capsules
    >>> x = keras.ops.convert_to_tensor([[3.0, 4.0], [0.0, 0.0]])
    >>> v = keras_capsules.ops.squash(x)  # lengths 25/26 and 0
    """
    offset = check_positive_number(offset, "offset")
    x = ops.convert_to_tensor(x)
    dtype, compute_dtype = compute_dtypes(x)
    x = ops.cast(x, compute_dtype)
    squared_norm = ops.sum(ops.square(x), axis=axis, keepdims=True)
    # Epsilon inside the root: sqrt'(0) is infinite, so a bare norm would turn
    # the (correctly zero) gradient at s = 0 into 0 * inf = NaN.
    norm = ops.sqrt(squared_norm + keras.config.epsilon())
    scale = squared_norm / ((offset + squared_norm) * norm)
    return ops.cast(x * scale, dtype)
