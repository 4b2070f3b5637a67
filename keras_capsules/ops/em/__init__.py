"""EM routing between matrix capsules (Hinton, Sabour & Frosst 2018).

`em_routing` routes dense votes (every child connected to every parent)
and `em_conv_routing` convolutional ones. Both run the routing core of
the layers `EMConvCaps` and `EMClassCaps`, with the same defaults
(docs/design/em_routing_defaults.md). `OFFICIAL_EM_OPTIONS`
(convolutional layers) and `OFFICIAL_EM_CLASS_OPTIONS` (class layer) hold
the official code's settings.
"""

import types

from keras import ops

from keras_capsules._validation import check_votes_rank
from keras_capsules._validation import normalize_padding
from keras_capsules._validation import normalize_pair
from keras_capsules.ops._tiles import tiling
from keras_capsules.ops.em import _core
from keras_capsules.ops.em._vote_layouts import PositionsFirst

_DEFAULTS = _core.DEFAULTS

# The official code's settings (google-research capsule_em, em_layers.py)
# as read-only keyword arguments: with them the ops reproduce its
# `update_conv_routing` and `update_em_routing` to float precision
# (docs/em_routing.md). Both route 3 times (the `routing_iteration` flag)
# with its M-step forms and `min_var` 5e-4. The convolutional layers use
# the `final_beta` flag, 0.01, a mass epsilon of 1e-7 and the official
# E-step numerics, for `em_conv_routing`.
OFFICIAL_EM_OPTIONS = types.MappingProxyType(
    {
        "routing_iterations": 3,
        "final_lambda": 0.01,
        "min_variance": 5e-4,
        "epsilon": 1e-7,
        "routing_mode": "official",
        "routing_normalization": "reference",
    }
)
# The class layer divides `final_beta` by 4 and adds 1e-5 to its masses,
# for `em_routing`.
OFFICIAL_EM_CLASS_OPTIONS = types.MappingProxyType(
    {
        "routing_iterations": 3,
        "final_lambda": 0.0025,
        "min_variance": 5e-4,
        "epsilon": 1e-5,
        "routing_mode": "official",
    }
)


def em_routing(
    votes,
    activations,
    beta_v,
    beta_a,
    routing_iterations=_DEFAULTS.routing_iterations,
    final_lambda=_DEFAULTS.final_lambda,
    min_variance=_DEFAULTS.min_variance,
    epsilon=_DEFAULTS.epsilon,
    routing_mode=_DEFAULTS.routing_mode,
    return_assignments=False,
):
    """Routes matrix-capsule votes to parent capsules with EM (dense case).

    Procedure 1 of the paper: every parent `j` is a Gaussian over the vote
    elements, fitted to the votes `V[i, j]` of the children `i` weighted by
    their activations `a[i]` and assignments `R[i, j]`. `R` starts uniform;
    each iteration is an M-step then an E-step (skipped in the last one). The
    M-step, with `r[i, j] = R[i, j] a[i]`, `mass[j] = sum_i r[i, j] + epsilon`:

    - `mu[j] = sum_i r[i, j] V[i, j] / mass[j]` and, per element `h`,
      `sigma2[j] = min_variance + sum_i r[i, j] (V[i, j] - mu[j])^2 / mass[j]`.
    - `routing_mode="paper"`, Procedure 1: `cost_h = (beta_v + log sigma_h)
      mass`, logit `lambda (beta_a - sum_h cost_h)`; the paper gives no
      schedule, here `lambda_i = final_lambda (i + 1) / routing_iterations`.
    - `routing_mode="official"`, the official code's forms: `mu = 0.9 mu_new +
      0.1 mu_prev` (the first with zero), logit `lambda (mass (-sum_h log
      sigma2_h - beta_v D (log(2 pi) + 1)) - 5000 beta_a)` with `D =
      pose_size`, and `lambda_i = final_lambda (1 - 0.95^(i + 1))`.
    - Parent activation `sigmoid(logit)`. E-step, in the log domain:
      `R[i, :] = softmax_j(log_sigmoid(logit[j]) + log N(V[i, j]; mu[j],
      sigma2[j]))`, so that distant votes cannot underflow to zero.

    The maths runs in `float32` for half-precision inputs; the results have
    the dtype of `votes`. `**OFFICIAL_EM_CLASS_OPTIONS` (`routing_iterations=3,
    final_lambda=0.0025, min_variance=5e-4, epsilon=1e-5,
    routing_mode="official"`) reproduces the official class layer
    (`update_em_routing`) to float precision; the defaults differ from it in
    `routing_iterations`, `final_lambda`, `routing_mode` and `epsilon`
    (docs/em_routing.md, "Against the official code").

    Paper: [Matrix capsules with EM routing](
    https://openreview.net/forum?id=HJWLfGWRb) (Hinton et al., ICLR 2018).

    Args:
        votes: Tensor of shape `(..., num_in, num_out, pose_size)`, the votes
            `V[i, j]` (a flattened 4x4 pose gives `pose_size=16`).
        activations: Tensor of shape `(..., num_in)`, in `[0, 1]`.
        beta_v: Tensor broadcastable to `(num_out,)`, the cost per unit of log
            standard deviation.
        beta_a: Tensor broadcastable to `(num_out,)`, the activation threshold.
        routing_iterations: Positive integer. Defaults to `2`; the paper and
            the official code use 3 (docs/design/em_routing_defaults.md).
        final_lambda: Positive float, the inverse temperature the schedule
            reaches. Defaults to `1e-3` (the official `final_beta` is 0.01).
        min_variance: Positive float, the floor added to every variance.
            Defaults to `5e-4` (the official `min_var`).
        epsilon: Optional positive float added to every mass. Defaults to
            `None`, which means `keras.config.epsilon()`.
        routing_mode: `"paper"` or `"official"`, the M-step forms above.
            Defaults to `"paper"`.
        return_assignments: Boolean, whether to also return the `R` of the
            final M-step. Defaults to `False`.

    Returns:
        A tuple `(poses, activations)`: the parent means `mu`, of shape
        `(..., num_out, pose_size)`, and activations, `(..., num_out)`. With
        `return_assignments=True`, also `R`, of shape `(..., num_in, num_out)`.

    Raises:
        ValueError: If an argument is out of range, if `votes` has rank below
            3, or if `activations` or a beta does not match `votes`.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> votes = np.random.rand(2, 288, 5, 16).astype("float32")
    >>> activations = np.random.rand(2, 288).astype("float32")
    >>> poses, probabilities = keras_capsules.ops.em_routing(
    ...     votes, activations, beta_v=np.full(5, 2.0, "float32"),
    ...     beta_a=np.full(5, 1.0, "float32"),
    ... )
    >>> tuple(poses.shape), tuple(probabilities.shape)
    ((2, 5, 16), (2, 5))

    Reference:
    - [Official TensorFlow code](https://github.com/google-research/
      google-research/tree/master/capsule_em)
    """
    options = _core.check_options(
        routing_iterations, final_lambda, min_variance, epsilon, routing_mode
    )
    votes = ops.convert_to_tensor(votes)
    activations = ops.convert_to_tensor(activations)
    votes_shape = tuple(votes.shape)
    check_votes_rank(votes_shape, "pose_size")
    _check_activations_shape(tuple(activations.shape), votes_shape[:-2])
    return _core.route_dense(
        votes, activations, beta_v, beta_a, options, return_assignments
    )


def em_conv_routing(
    votes,
    activations,
    beta_v,
    beta_a,
    kernel_size,
    strides=1,
    padding="valid",
    routing_iterations=_DEFAULTS.routing_iterations,
    final_lambda=_DEFAULTS.final_lambda,
    min_variance=_DEFAULTS.min_variance,
    epsilon=_DEFAULTS.epsilon,
    routing_mode=_DEFAULTS.routing_mode,
    routing_normalization=_core.DEFAULT_NORMALIZATION,
    return_assignments=False,
):
    """EM routing between two convolutional grids of matrix capsules.

    The convolutional case of `em_routing`, with its options: the parents at
    an output position get votes only from the children of its `kernel_size`
    window (`extract_capsule_patches`), and the M-step is the dense one per
    position. The paper leaves open how the E-step normalises the `R` of a
    child that overlapping windows share; `routing_normalization` chooses:

    - `"official"`, the official code's intent: per output type, over all the
      windows that contain the child, entries grouped by child at any stride
      (the official code groups them as if the stride were 1).
    - `"window"`, as in the public ports: over the output types of each window;
      a child in `n` windows counts as `n` children.
    - `"all_parents"` (Gritzman 2019): over every parent the child feeds, all
      types at all positions, with `R` starting at `1 / (num_out * n)`.
    - `"reference"`, the official `update_conv_routing`: as `"official"`, but
      with one `log p` shift per (example, input type, output type), `exp /
      (sum + epsilon)`, entries grouped by output position plus kernel offset
      (across children at stride 2); the padding of `"same"` takes part.

    `**OFFICIAL_EM_OPTIONS` (`routing_iterations=3, final_lambda=0.01,
    min_variance=5e-4, epsilon=1e-7, routing_mode="official",
    routing_normalization="reference"`) reproduces the official convolutional
    routing to float precision.

    Paper: [Matrix capsules with EM routing](
    https://openreview.net/forum?id=HJWLfGWRb) (Hinton et al., ICLR 2018).

    Args:
        votes: Tensor `(batch, out_height, out_width, kernel_h * kernel_w *
            num_in, num_out, pose_size)`, the votes of each position's window,
            children in `(kernel row, kernel column, input type)` order.
        activations: Tensor of shape `(batch, height, width, num_in)`, the
            child activations on the *input* grid, in `[0, 1]`.
        beta_v: Tensor broadcastable to `(num_out,)`, see `em_routing`.
        beta_a: Tensor broadcastable to `(num_out,)`, see `em_routing`.
        kernel_size: Positive integer or tuple of 2, the window size.
        strides: Positive integer or tuple of 2. Defaults to `1`.
        padding: `"valid"` or `"same"` (with inactive children). Defaults to
            `"valid"`.
        routing_iterations: Positive integer. Defaults to `2`.
        final_lambda: Positive float. Defaults to `1e-3`.
        min_variance: Positive float. Defaults to `5e-4`.
        epsilon: Optional positive float. Defaults to `None`.
        routing_mode: `"paper"` or `"official"`. Defaults to `"paper"`.
        routing_normalization: See above. Defaults to `"official"`
            (docs/design/em_routing_defaults.md).
        return_assignments: Boolean, whether to also return the `R` of the
            final M-step. Defaults to `False`.

    Returns:
        A tuple `(poses, activations)`, `(batch, out_height, out_width,
        num_out, pose_size)` and `(batch, out_height, out_width, num_out)`;
        with `return_assignments=True`, also `R` (`votes` without `pose_size`).

    Raises:
        ValueError: If an argument is out of range, or if the shapes of
            `votes`, `activations` and the betas do not fit the windows.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> activations = np.random.rand(2, 6, 6, 4).astype("float32")
    >>> votes = np.random.rand(2, 2, 2, 3 * 3 * 4, 8, 16).astype("float32")
    >>> poses, probabilities = keras_capsules.ops.em_conv_routing(
    ...     votes, activations, beta_v=np.zeros(8, "float32"),
    ...     beta_a=np.zeros(8, "float32"), kernel_size=3, strides=2,
    ... )
    >>> tuple(poses.shape), tuple(probabilities.shape)
    ((2, 2, 2, 8, 16), (2, 2, 2, 8))

    Reference:
    - [Official TensorFlow code](https://github.com/google-research/
      google-research/tree/master/capsule_em)
    - [Gritzman, Avoiding implementation pitfalls of "Matrix capsules with
      EM routing"](https://arxiv.org/abs/1907.00652) (2019)
    """
    options = _core.check_options(
        routing_iterations, final_lambda, min_variance, epsilon, routing_mode
    )
    routing_normalization = _core.check_normalization(routing_normalization)
    kernel_size = normalize_pair(kernel_size, "kernel_size")
    strides = normalize_pair(strides, "strides")
    padding = normalize_padding(padding)
    votes = ops.convert_to_tensor(votes)
    activations = ops.convert_to_tensor(activations)
    act_shape = tuple(activations.shape)
    if len(act_shape) != 4 or any(d is None for d in act_shape[1:]):
        raise ValueError(
            "Argument activations must have shape (batch, height, width, "
            "num_in) with static height, width and num_in. "
            f"Received: activations.shape={act_shape}"
        )
    height, width, num_in = act_shape[1:]
    geometry = tiling((height, width), kernel_size, strides, padding)
    (out_h, out_w) = geometry.out_size
    kernel_h, kernel_w = kernel_size
    votes_shape = tuple(votes.shape)
    if (
        len(votes_shape) != 6
        or votes_shape[1:4] != (out_h, out_w, kernel_h * kernel_w * num_in)
        or any(d is None for d in votes_shape[4:])
    ):
        raise ValueError(
            "Argument votes must have shape (batch, out_height, out_width, "
            "kernel_h * kernel_w * num_in, num_out, pose_size) = (batch, "
            f"{out_h}, {out_w}, {kernel_h * kernel_w * num_in}, num_out, "
            f"pose_size) for activations of shape {act_shape}, "
            f"kernel_size={kernel_size}, strides={strides} and "
            f"padding={padding!r}. Received: votes.shape={votes_shape}"
        )
    if (
        votes_shape[0] is not None
        and act_shape[0] is not None
        and votes_shape[0] != act_shape[0]
    ):
        raise ValueError(
            "Arguments votes and activations must have the same batch "
            f"size. Received: votes.shape={votes_shape}"
        )
    return _core.route_conv(
        votes,
        activations,
        beta_v,
        beta_a,
        PositionsFirst(geometry, num_in),
        routing_normalization,
        options,
        return_assignments,
    )


def _check_activations_shape(act_shape, expected):
    compatible = len(act_shape) == len(expected) and all(
        a is None or e is None or a == e for a, e in zip(act_shape, expected)
    )
    if not compatible:
        raise ValueError(
            "Argument activations must have the shape of votes without "
            f"its last two axes, {expected}. "
            f"Received: activations.shape={act_shape}"
        )
