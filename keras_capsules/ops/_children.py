"""Sums over the children axis of EM routing, and their adjoint broadcasts.

EM routing spends its time in two moves between the children of a layer
and their parents: sums over the children (the M-step's mass, mean and
variance) and broadcasts of parent statistics back to every child (the
deviations and the E-step), whose gradients are sums over the children
again. TensorFlow's XLA on CPU emits a `reduce` over a long children axis
whose input is a fused product (such as `weights * votes`, with `weights`
broadcast over the pose) as a slow loop: ~90 ms for 288 children of a
`(288, 288, 32, 16)` float32 product, against ~10 ms when the same sum is
written as 8 slice additions followed by a `reduce` over the remaining 36.
So on TensorFlow the sums take that chunked form, and both functions carry
custom gradients so that the backward pass uses it too instead of the
plain `reduce` that differentiating a broadcast produces. With JAX (a
newer XLA) the chunked form measured slower (EMConvCaps 14x14x32 -> 32,
batch 8: 2.1 s per training step against 1.7 s), and PyTorch runs
eagerly, where its own `sum` is the fast path: both get plain sums and
broadcasting.
"""

import keras
from keras import ops


def _chunked_backend(x):
    # Symbolic tensors (functional model construction) only need shapes,
    # and a custom gradient cannot take them.
    return keras.backend.backend() == "tensorflow" and not isinstance(
        x, keras.KerasTensor
    )


def _slice(x, axis, start, stop):
    index = [slice(None)] * len(x.shape)
    index[axis] = slice(start, stop)
    return x[tuple(index)]


def _chunked_sum(x, axis):
    """Sum over `axis`, kept with size 1: chunks added, then one reduce."""
    size = x.shape[axis]
    chunks = next((n for n in (8, 9, 7, 6, 5, 4, 3, 2) if size % n == 0), 1)
    step = size // chunks
    total = _slice(x, axis, 0, step)
    for start in range(step, size, step):
        total = total + _slice(x, axis, start, start + step)
    return ops.sum(total, axis=axis, keepdims=True)


def sum_children(x, axis):
    """`keras.ops.sum(x, axis, keepdims=True)` for a static children axis.

    On TensorFlow the sum is chunked and its gradient a broadcast;
    elsewhere it is `keras.ops.sum`.
    """
    if not _chunked_backend(x):
        return ops.sum(x, axis=axis, keepdims=True)
    size = x.shape[axis]

    @ops.custom_gradient
    def chunked_sum(x):
        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return ops.repeat(upstream, size, axis=axis)

        return _chunked_sum(x, axis), grad

    return chunked_sum(x)


def spread_children(x, axis, size):
    """Broadcasts the size-1 `axis` of `x` to `size` children.

    On TensorFlow the gradient (a sum over the children) is chunked;
    elsewhere `x` is returned as it is, for the arithmetic that uses it to
    broadcast.
    """
    if not _chunked_backend(x):
        return x

    @ops.custom_gradient
    def spread(x):
        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return _chunked_sum(upstream, axis)

        return ops.repeat(x, size, axis=axis), grad

    return spread(x)
