"""A numerically stable softmax of any rank, shared by both routings."""

from keras import ops


def softmax(logits, axis):
    # Same stable softmax as `keras.ops.softmax` (the maximum is subtracted
    # first, so the largest term is exactly 1), written out because
    # TensorFlow's oneDNN CPU kernel rejects inputs of rank above 5
    # ("Input dims must be <= 5") and routing logits reach rank 6 or more.
    # The shift cancels in the gradient, hence the stop_gradient.
    shifted = logits - ops.stop_gradient(
        ops.max(logits, axis=axis, keepdims=True)
    )
    exp = ops.exp(shifted)
    return exp / ops.sum(exp, axis=axis, keepdims=True)
