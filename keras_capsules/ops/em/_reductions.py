"""EM routing's reductions over the children, and their gradients.

The sums over the children axis and their adjoint broadcasts, and the
three steps of an EM iteration that read the votes (the mean,
the variance, the E-step exponent), with hand-written gradients: see the
comment above `weighted_mean`.

EM routing spends its time in two moves between the children of a layer
and their parents: sums over the children (the M-step's mass, mean and
variance) and broadcasts of parent statistics back to every child (the
deviations and the E-step), whose gradients are sums over the children
again. XLA on CPU emits a `reduce` over a long children axis whose input
is a fused product (such as `weights * votes`) as a slow loop, several
times slower than the same sum written as a few slice additions followed
by a `reduce` over what is left. So with XLA (TensorFlow and JAX) the sums
take that chunked form, and both functions carry custom gradients so that
the backward pass uses it too (measurements: docs/performance.md, "What
makes the EM training step fast and small"). PyTorch runs eagerly, where
its own `sum` is the fast path: it gets plain sums and broadcasting.
"""

import keras
from keras import ops

from keras_capsules.ops._backend import chunked_sums


def _slice(x, axis, start, stop):
    index = [slice(None)] * len(x.shape)
    index[axis] = slice(start, stop)
    return x[tuple(index)]


def chunk_count(size):
    """How many slices `chunked_sum` adds before its final `reduce`.

    The most slices that leave more than 32 children each. XLA's CPU
    tree-reduction rewrite splits only a reduced axis longer than 32 into
    a `reduce-window`, and only then does it keep the slice additions in a
    separate, vectorised loop: with 32 or fewer left, the slices, their
    product and the `reduce` fuse into one scalar loop per parent, several
    times slower (`python -m benchmarks.children_sums`; docs/performance.md,
    "The small network was slower than the full one").
    """
    return max(
        (n for n in range(1, size + 1) if size % n == 0 and size // n > 32),
        default=1,
    )


def chunked_sum(x, axis):
    """Sum over `axis`, kept with size 1: chunks added, then one reduce."""
    return sliced_sum(x, axis, chunk_count(x.shape[axis]))


def sliced_sum(x, axis, slices):
    """Sum over `axis`, kept with size 1: `slices` equal slices added,
    then one reduce over what is left (`slices` divides the size)."""
    size = x.shape[axis]
    step = size // slices
    total = _slice(x, axis, 0, step)
    for start in range(step, size, step):
        total = total + _slice(x, axis, start, start + step)
    return ops.sum(total, axis=axis, keepdims=True)


def sum_children(x, axis):
    """`keras.ops.sum(x, axis, keepdims=True)` for a static children axis.

    With XLA (TensorFlow, JAX) the sum is chunked and its gradient a
    broadcast; on PyTorch it is `keras.ops.sum`.
    """
    if not chunked_sums(x):
        return ops.sum(x, axis=axis, keepdims=True)
    size = x.shape[axis]

    @ops.custom_gradient
    def total(x):
        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return ops.repeat(upstream, size, axis=axis)

        return chunked_sum(x, axis), grad

    return total(x)


def spread_children(x, axis, size):
    """Broadcasts the size-1 `axis` of `x` to `size` children.

    With XLA the gradient (a sum over the children) is chunked; on
    PyTorch `x` is returned as it is, for the arithmetic that uses it to
    broadcast.
    """
    if not chunked_sums(x):
        return x

    @ops.custom_gradient
    def spread(x):
        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return chunked_sum(upstream, axis)

        return ops.repeat(x, size, axis=axis), grad

    return spread(x)


def _children_sum(x, axis):
    """A sum over the children inside a hand-written gradient: the form
    `sum_children` takes, without a custom gradient of its own."""
    if chunked_sums(x):
        return chunked_sum(x, axis)
    return ops.sum(x, axis=axis, keepdims=True)


def _reduce_to(x, shape, child_axis):
    """Sums `x` over the axes where `shape` has size 1: the gradient of a
    tensor of that shape which was broadcast to the shape of `x`."""
    if shape[child_axis] == 1 and x.shape[child_axis] != 1:
        x = _children_sum(x, child_axis)
    axes = tuple(
        axis
        for axis, (size, full) in enumerate(zip(shape, x.shape))
        if size == 1 and full != 1
    )
    return ops.sum(x, axis=axes, keepdims=True) if axes else x


def _materialize(x):
    """`x`, computed once before the vote-sized loops that read it.

    XLA fuses cheap elementwise producers into their consumers even when
    the consumer broadcasts them: a parent or child statistic (a momentum
    average, an upstream gradient) read by a loop over the votes is then
    recomputed for every vote, ~100 operations each. A reduction is never
    fused into a loop that reads it, and adding zero is exact, so this sum
    keeps the small tensor in memory, about 3x faster for the EMConvCaps
    training step (docs/performance.md). PyTorch computes every operation
    once anyway.
    """
    if not chunked_sums(x):
        return x
    return ops.sum(ops.stack([x, ops.zeros_like(x)]), axis=0)


def _tensors(*values):
    # PyTorch's autograd only follows tensors into a custom gradient, not
    # Keras variables.
    return [ops.convert_to_tensor(value) for value in values]


def _upstream(args, upstream):
    return _materialize(args[0] if upstream is None else upstream)


# The three vote-sized computations of an EM iteration, differentiated by
# hand on every backend (symbolic tensors only need shapes). Automatic
# differentiation saves vote-sized intermediates (the deviations from the
# means and their squares) from the forward pass for the backward, and
# TensorFlow sums the gradients the votes receive with one AddN that waits
# for all of them: with XLA on CPU that held five vote-sized buffers at the
# peak of an EMConvCaps training step. The gradients below are products of
# the votes with small child and parent statistics, which XLA recomputes
# inside the fused sum instead of storing; every factor is small, and the
# sums over the children of the parent gradients are written apart from
# the vote gradients, since XLA stores a product (or a quotient) that two
# fusions read. PyTorch, which runs eagerly, keeps fewer buffers too.


def weighted_mean(weights, votes, child_axis):
    """`sum_children(weights * votes)`, the M-step mean (Procedure 1).

    `weights` has size 1 on the pose axes.
    """
    if isinstance(votes, keras.KerasTensor):
        return ops.sum(weights * votes, axis=child_axis, keepdims=True)

    @ops.custom_gradient
    def mean(weights, votes):
        weights = _materialize(weights)

        def grad(*args, upstream=None):
            upstream = _upstream(args, upstream)
            return (
                _reduce_to(votes * upstream, weights.shape, child_axis),
                _reduce_to(weights * upstream, votes.shape, child_axis),
            )

        return _children_sum(weights * votes, child_axis), grad

    return mean(*_tensors(weights, votes))


def weighted_variance(weights, votes, mean, child_axis):
    """`sum_children(weights * (votes - mean) ** 2)` (Procedure 1).

    `mean` has size 1 on the children axis.
    """
    if isinstance(votes, keras.KerasTensor):
        return ops.sum(
            weights * ops.square(votes - mean), axis=child_axis, keepdims=True
        )

    @ops.custom_gradient
    def variance(weights, votes, mean):
        weights = _materialize(weights)
        mean = _materialize(mean)

        def grad(*args, upstream=None):
            twice = _materialize(2.0 * _upstream(args, upstream))
            deviation = votes - mean
            # d/dmean = -sum_i 2 w_i u (v_i - mean): `u` has no children
            # axis and leaves the sum.
            d_mean = -twice * _children_sum(weights * deviation, child_axis)
            return (
                _reduce_to(
                    0.5 * twice * ops.square(deviation),
                    weights.shape,
                    child_axis,
                ),
                _reduce_to(
                    weights * twice * deviation, votes.shape, child_axis
                ),
                _reduce_to(d_mean, mean.shape, child_axis),
            )

        return (
            _children_sum(weights * ops.square(votes - mean), child_axis),
            grad,
        )

    return variance(*_tensors(weights, votes, mean))


def deviation_energy(votes, mean, variance, child_axis, pose_axes):
    """`sum_pose((votes - mean) ** 2 / (2 variance))`, the E-step exponent.

    `mean` and `variance` have size 1 on the children axis, the result on
    the pose axes.
    """
    if isinstance(votes, keras.KerasTensor):
        return ops.sum(
            ops.square(votes - mean) / (2.0 * variance),
            axis=pose_axes,
            keepdims=True,
        )

    @ops.custom_gradient
    def energy(votes, mean, variance):
        mean = _materialize(mean)
        inverse = ops.reciprocal(variance)

        def grad(*args, upstream=None):
            upstream = _upstream(args, upstream)
            deviation = votes - mean
            # `upstream` has no pose axes and `inverse` no children axis:
            # both leave the sums over the children of the parent
            # gradients.
            d_mean = -inverse * _children_sum(upstream * deviation, child_axis)
            d_variance = (
                -0.5
                * ops.square(inverse)
                * _children_sum(upstream * ops.square(deviation), child_axis)
            )
            return (
                _reduce_to(
                    deviation * upstream * inverse, votes.shape, child_axis
                ),
                _reduce_to(d_mean, mean.shape, child_axis),
                _reduce_to(d_variance, variance.shape, child_axis),
            )

        # The small reciprocal, not a quotient of vote-sized squares: XLA
        # fuses the product into the sum.
        squares = ops.square(votes - mean) * (0.5 * inverse)
        return ops.sum(squares, axis=pose_axes, keepdims=True), grad

    return energy(*_tensors(votes, mean, variance))
