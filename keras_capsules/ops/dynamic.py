"""Dynamic routing-by-agreement (Sabour, Frosst & Hinton 2017)."""

from keras import ops

from keras_capsules._validation import check_broadcasts
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import check_votes_rank
from keras_capsules.ops._dtypes import compute_dtypes
from keras_capsules.ops._softmax import softmax
from keras_capsules.ops.squash import squash


def dynamic_routing(
    votes,
    routing_iterations=3,
    bias=None,
    leaky_routing=False,
    stop_gradient=False,
    return_coupling=False,
):
    """Routes votes to output capsules by iterative agreement.

    Procedure 1 of the paper. Every input capsule `i` casts a vote
    `u_hat[i, j]` for every output capsule `j`. Routing logits `b[i, j]`
    start at zero for each example; each iteration turns them into coupling
    coefficients `c[i, :] = softmax(b[i, :])` over the *output* capsules,
    forms `s[j] = sum_i c[i, j] u_hat[i, j]` (Eq. 2), squashes it into
    `v[j] = squash(s[j])` (Eq. 1) and, except after the last iteration,
    raises `b[i, j]` by the agreement `u_hat[i, j] . v[j]`. The `v` of the
    last iteration is returned.

    Two options of the official implementation are available: a `bias`
    added to `s` before the squash, and leaky routing, where an extra
    all-zero logit joins the softmax and its share is dropped, so an input
    capsule that agrees with no output capsule can send most of its vote
    nowhere. With `stop_gradient=True`, the votes feeding the agreement
    updates and the non-final iterations are wrapped in
    `keras.ops.stop_gradient`, so gradients reach the votes only through
    the last iteration's weighted sum, as in several popular ports.

    The routing maths runs in `float32` for half-precision votes (and in
    the votes' own dtype otherwise); the results are cast back to the
    votes' dtype. The softmax subtracts the maximum logit first, and the
    squash uses `sqrt(|s|^2 + epsilon)` with
    `epsilon = keras.config.epsilon()`, so zero, identical and very large
    votes all stay finite.

    Paper: [Dynamic Routing Between Capsules](
    https://arxiv.org/abs/1710.09829) (Sabour, Frosst & Hinton, 2017).

    Args:
        votes: Tensor of shape `(..., num_in, num_out, dim)`: the
            prediction vectors `u_hat` of every input capsule for every
            output capsule, with any number of leading (batch, position)
            dimensions.
        routing_iterations: Positive integer, the number of routing
            iterations (the paper uses 3). Defaults to `3`.
        bias: Optional tensor broadcastable to `(num_out, dim)`, added to
            `s` before the squash (the official code uses one, initialised
            to 0.1). Defaults to `None`.
        leaky_routing: Boolean, whether to use leaky routing. Defaults to
            `False`.
        stop_gradient: Boolean, whether to block gradients through the
            agreement updates and the non-final iterations. Does not change
            the forward values. Defaults to `False`.
        return_coupling: Boolean, whether to also return the coupling
            coefficients of the last iteration. Defaults to `False`.

    Returns:
        The output capsules, a tensor of shape `(..., num_out, dim)`. With
        `return_coupling=True`, a tuple `(outputs, coupling)` where
        `coupling` has shape `(..., num_in, num_out)` and sums to 1 over
        `num_out` (to less than 1 with `leaky_routing=True`).

    Raises:
        ValueError: If `routing_iterations` is not a positive integer, if
            `votes` has rank below 3, or if `bias` does not broadcast to
            `(num_out, dim)`.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> votes = np.random.rand(2, 1152, 10, 16).astype("float32")
    >>> outputs = keras_capsules.ops.dynamic_routing(
    ...     votes, routing_iterations=3
    ... )
    >>> tuple(outputs.shape)
    (2, 10, 16)

    Reference:
    - [Official TensorFlow code](https://github.com/Sarasra/models/tree/
      master/research/capsules)
    """
    routing_iterations = check_positive_int(
        routing_iterations, "routing_iterations"
    )
    votes = ops.convert_to_tensor(votes)
    check_votes_rank(votes.shape)
    dtype, compute_dtype = compute_dtypes(votes)
    votes = ops.cast(votes, compute_dtype)
    if bias is not None:
        bias = ops.cast(bias, compute_dtype)
        check_broadcasts(
            tuple(bias.shape),
            tuple(votes.shape[-2:]),
            "bias",
            "the output capsules (num_out, dim) =",
        )

    frozen_votes = ops.stop_gradient(votes) if stop_gradient else votes
    # b = 0 for every example (Procedure 1, line 2), so the first coupling
    # is uniform: 1 / num_out, or 1 / (num_out + 1) beside the leak. It is
    # applied as a scale rather than as the softmax of a zero tensor, which
    # XLA would build and fold as a batch-sized constant at compile time.
    num_out = votes.shape[-2]
    if num_out is None:
        num_out = ops.cast(ops.shape(votes)[-2], compute_dtype)
    share = 1.0 / (num_out + int(leaky_routing))
    logits = coupling = None
    for iteration in range(routing_iterations):
        is_last = iteration == routing_iterations - 1
        step_votes = votes if is_last else frozen_votes
        if logits is None:
            preactivation = ops.sum(step_votes, axis=-3) * share
        else:
            coupling = _coupling_coefficients(logits, leaky_routing)
            preactivation = ops.einsum(
                "...io,...iod->...od", coupling, step_votes
            )
        if bias is not None:
            preactivation = preactivation + bias
        outputs = squash(preactivation)
        if not is_last:
            agreement = ops.einsum("...iod,...od->...io", frozen_votes, outputs)
            logits = agreement if logits is None else logits + agreement
    outputs = ops.cast(outputs, dtype)
    if not return_coupling:
        return outputs
    if coupling is None:
        coupling = ops.ones_like(votes[..., 0]) * share
    return outputs, ops.cast(coupling, dtype)


def _coupling_coefficients(logits, leaky_routing):
    if not leaky_routing:
        return softmax(logits, axis=-1)
    # The official "dustbin": a constant zero logit competes in the softmax
    # and its probability mass is discarded.
    leak = ops.zeros_like(logits[..., :1])
    routing = softmax(ops.concatenate([leak, logits], axis=-1), axis=-1)
    return routing[..., 1:]
