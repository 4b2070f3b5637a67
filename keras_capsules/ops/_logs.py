"""The guarded logarithm of the Stacked Capsule Autoencoders' official code,
shared by the mixture and sparsity ops."""

from keras import ops

# Below this a probability counts as zero; its log is then LOG_OF_ZERO.
TINY = 1e-16
LOG_OF_ZERO = -1e8


def safe_log(x):
    """`log(x)`, with `-1e8` (and a zero gradient) where `x < 1e-16`."""
    is_zero = x < TINY
    safe = ops.where(is_zero, ops.ones_like(x), x)
    return ops.where(is_zero, ops.full_like(x, LOG_OF_ZERO), ops.log(safe))
