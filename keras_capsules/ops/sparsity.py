"""The presence sparsity terms of Stacked Capsule Autoencoders."""

from keras import ops

from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import check_positive_number
from keras_capsules.ops._dtypes import compute_dtypes
from keras_capsules.ops._logs import safe_log

SPARSITY_KINDS = ("l2", "entropy")
# Added to the sums that normalise the entropy's distributions.
_NORMALIZE_EPSILON = 1e-8


def _normalize(x, axis):
    return x / (ops.sum(x, axis=axis, keepdims=True) + _NORMALIZE_EPSILON)


def _entropy(p, axis):
    return -ops.sum(p * safe_log(p), axis=axis)


def capsule_sparsity(
    presence, kind="l2", num_classes=10, within_example_constant=None
):
    """Within-example and between-example sparsity of capsule presences.

    Stacked Capsule Autoencoders ask each image to use a few object
    capsules (sparse within an example) and each capsule to be used by
    some images (varied between examples), in two ways:

    - `kind="l2"` (official for the prior presences, `(batch, K)` object
      presence probabilities `a`):
      `within = mean_b (sum_k a[b, k] - c)^2`, with
      `c = within_example_constant` (default `K / num_classes`), and
      `between = sum_k (sum_b a[b, k] - batch / num_classes)^2 / K`.
      Both are penalties: the loss adds them.
    - `kind="entropy"` (official for the posterior presences, the part
      mass each object explains): with `p_b` each example's presences
      normalised to sum to 1 and `q` the batch's summed presences
      normalised likewise, `within = mean_b H(p_b)` and
      `between = H(q)`. The loss adds `within` and subtracts `between`.

    `H(p) = -sum p log p`, with `log p = -1e8` for `p < 1e-16` and `1e-8`
    added to the normalising sums, as in the official code.

    Args:
        presence: Tensor of shape `(batch, num_capsules)`, non-negative.
        kind: `"l2"` or `"entropy"`. Defaults to `"l2"`.
        num_classes: Positive int, the number of classes the data is
            expected to hold; sets the l2 targets. Defaults to `10`.
        within_example_constant: Positive float, the l2 target for the
            summed presence of one example, or `None` for
            `num_capsules / num_classes`. Defaults to `None`. (The
            official MNIST script passes 4.3, but its code never reads
            it, so the official run used 32 / 10 = 3.2.)

    Returns:
        A tuple of two scalar tensors, `(within, between)`.

    Raises:
        ValueError: If `presence` does not have rank 2 or an argument is
            invalid.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> presence = np.random.uniform(size=(128, 32)).astype("float32")
    >>> within, between = keras_capsules.ops.capsule_sparsity(presence)
    >>> tuple(within.shape), tuple(between.shape)
    ((), ())

    Reference:
    - [The official TensorFlow code](
      https://github.com/akosiorek/stacked_capsule_autoencoders)
      (`capsules/capsule.py`, `sparsity_loss`)
    """
    check_option(kind, "kind", SPARSITY_KINDS)
    check_positive_int(num_classes, "num_classes")
    if within_example_constant is not None:
        check_positive_number(
            within_example_constant, "within_example_constant"
        )
    presence = ops.convert_to_tensor(presence)
    if len(presence.shape) != 2:
        raise ValueError(
            "Argument presence must have shape (batch, num_capsules). "
            f"Received: presence.shape={tuple(presence.shape)}"
        )
    dtype, compute_dtype = compute_dtypes(presence)
    presence = ops.cast(presence, compute_dtype)
    num_capsules = presence.shape[1]
    if kind == "entropy":
        within = ops.mean(_entropy(_normalize(presence, 1), axis=1))
        between = _entropy(_normalize(ops.sum(presence, axis=0), 0), 0)
    else:
        if within_example_constant is None:
            within_example_constant = num_capsules / num_classes
        batch = ops.cast(ops.shape(presence)[0], compute_dtype)
        within = ops.mean(
            ops.square(ops.sum(presence, axis=1) - within_example_constant)
        )
        between = (
            ops.sum(ops.square(ops.sum(presence, axis=0) - batch / num_classes))
            / num_capsules
        )
    return ops.cast(within, dtype), ops.cast(between, dtype)
