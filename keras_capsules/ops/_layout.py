"""The one place that decides how EM routing lays out and sums its votes.

Two forms of the same computation, picked by backend:

- With XLA (TensorFlow, JAX), `EMConvCaps` writes its votes children
  first, `(children, batch, out_h, out_w, pose_rows, num_out, pose_cols)`,
  the layout its batched matmul produces, so XLA transposes neither the
  votes for the routing nor their gradient for the matmul's backward pass;
  and every sum over the children is chunked (see `_em_reductions`).
- PyTorch runs eagerly (or under `torch.compile`), where its own `sum` is
  the fast path: votes positions first, `(batch, out_h, out_w, children,
  num_out, pose_size)` with each pose in one piece, and plain sums.

Both the vote computation (`em._em_conv_capsules`) and the
reductions (`_em_reductions`) ask `children_first`, so they cannot
disagree; layers never look at the backend.
"""

import keras


def children_first():
    """Whether this backend routes convolutional votes children first."""
    return keras.backend.backend() in ("tensorflow", "jax")


def chunked_sums(x):
    """Whether sums over the children of `x` take the chunked XLA form.

    Symbolic tensors (functional model construction) only need shapes, and
    a custom gradient cannot take them.
    """
    return children_first() and not isinstance(x, keras.KerasTensor)
