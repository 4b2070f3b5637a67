"""The squash non-linearity of capsule networks: the rational form of
Sabour et al. (2017) and the exponential form of Mazzia et al. (2021)."""

import keras
from keras import ops

from keras_capsules._validation import check_axis
from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_number
from keras_capsules.ops._dtypes import compute_dtypes

FORMS = ("rational", "exponential")


def squash(x, axis=-1, offset=1.0, squash_form="rational"):
    """Shrinks vectors to a length in `[0, 1)`, keeping their direction.

    Short vectors shrink to almost zero length and long vectors to a length
    slightly below 1, so the length of a capsule can be read as the
    probability that the entity it represents is present. Two forms:

    - `squash_form="rational"`, Eq. 1 of Sabour et al.:
      `v = |s|^2 / (offset + |s|^2) * s / |s|`. `offset=1.0` is the
      paper's form; `offset=0.5` gives the steeper variant used by several
      ports.
    - `squash_form="exponential"`, the squash of Efficient-CapsNet:
      `v = (1 - exp(-|s|)) * s / |s|`, which grows linearly near zero
      (length `|s|` for short vectors) instead of quadratically.
      `offset` plays no part in it.

    The norm is computed as `sqrt(|s|^2 + epsilon)` with
    `epsilon = keras.config.epsilon()`, so the value (0) and the gradient
    are finite at an exactly-zero vector in both forms. (The authors of
    Efficient-CapsNet add `1e-20` to `|s|` and to `exp(|s|)` instead, which
    leaves the gradient at zero undefined.) Half-precision inputs
    (`float16`, `bfloat16`) are squashed in `float32` and cast back, since
    `|s|^2` overflows `float16` from `|s| ~ 256` on.

    Papers: [Dynamic Routing Between Capsules](
    https://arxiv.org/abs/1710.09829) (Sabour, Frosst & Hinton, 2017);
    [Efficient-CapsNet: capsule network with self-attention routing](
    https://doi.org/10.1038/s41598-021-93977-0) (Mazzia, Salvetti &
    Chiaberge, 2021).

    Args:
        x: Tensor of capsule vectors, e.g. `(batch, num_capsules,
            capsule_dim)`.
        axis: Integer, the axis that holds the capsule components.
            Defaults to `-1`.
        offset: Positive float, the constant in the denominator of the
            rational scale. Defaults to `1.0`.
        squash_form: `"rational"` (Sabour et al.) or `"exponential"`
            (Efficient-CapsNet). Defaults to `"rational"`.

    Returns:
        A tensor with the shape and dtype of `x` (integer inputs become
        `keras.config.floatx()`), whose vectors along `axis` have length in
        `[0, 1)`.

    Raises:
        ValueError: If `offset` is not a positive number, `squash_form`
            is not one of the two names above, or `axis` is not an axis of
            `x`.
        TypeError: If `axis` is not an integer.

    Example:

    >>> import keras
    >>> import keras_capsules
    >>> x = keras.ops.convert_to_tensor([[3.0, 4.0], [0.0, 0.0]])
    >>> v = keras_capsules.ops.squash(x)  # lengths 25/26 and 0
    >>> # Lengths 1 - e^-5 and 0:
    >>> w = keras_capsules.ops.squash(x, squash_form="exponential")
    """
    offset = check_positive_number(offset, "offset")
    check_option(squash_form, "squash_form", FORMS)
    x = ops.convert_to_tensor(x)
    check_axis(axis, len(x.shape))
    dtype, compute_dtype = compute_dtypes(x)
    x = ops.cast(x, compute_dtype)
    squared_norm = ops.sum(ops.square(x), axis=axis, keepdims=True)
    # Epsilon inside the root: sqrt'(0) is infinite, so a bare norm would turn
    # the (correctly zero) gradient at s = 0 into 0 * inf = NaN.
    norm = ops.sqrt(squared_norm + keras.config.epsilon())
    if squash_form == "rational":
        scale = squared_norm / ((offset + squared_norm) * norm)
    else:
        # 1 - exp(-|s|) as -expm1(-|s|): exact for short vectors.
        scale = -ops.expm1(-norm) / norm
    return ops.cast(x * scale, dtype)
