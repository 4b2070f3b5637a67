"""EM routing between matrix capsules (Hinton, Sabour & Frosst 2018).

The public front door of EM routing: `em_routing` (every child connected
to every parent) and `em_conv_routing` (convolutional windows). Both run
the core in `_core`, which the layers `EMConvCaps` and `EMClassCaps`
share. The defaults are the setting that learns, the same as the layers';
`OFFICIAL_EM_OPTIONS` (convolutional layers) and
`OFFICIAL_EM_CLASS_OPTIONS` (class layer) hold the official code's.
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
        "iterations": 3,
        "final_lambda": 0.01,
        "min_variance": 5e-4,
        "epsilon": 1e-7,
        "mode": "official",
        "normalization": "reference",
    }
)
# The class layer divides `final_beta` by 4 and adds 1e-5 to its masses,
# for `em_routing`.
OFFICIAL_EM_CLASS_OPTIONS = types.MappingProxyType(
    {
        "iterations": 3,
        "final_lambda": 0.0025,
        "min_variance": 5e-4,
        "epsilon": 1e-5,
        "mode": "official",
    }
)


def em_routing(
    votes,
    activations,
    beta_v,
    beta_a,
    iterations=_DEFAULTS.iterations,
    final_lambda=_DEFAULTS.final_lambda,
    min_variance=_DEFAULTS.min_variance,
    epsilon=_DEFAULTS.epsilon,
    mode=_DEFAULTS.mode,
    return_assignments=False,
):
    """Routes matrix-capsule votes to parent capsules with EM (dense case).

    Procedure 1 of the paper: every parent capsule `j` is a Gaussian over
    the `pose_size` vote elements, fitted to the votes `V[i, j]` of the
    child capsules `i` weighted by their activations `a[i]` and their
    assignment probabilities `R[i, j]`. `R` starts uniform over the
    parents; each routing iteration is an M-step (fit the Gaussians and the
    parent activations) followed by an E-step (re-assign the children),
    except the last iteration, whose E-step would not change the outputs
    and is skipped. Every child is connected to every parent; see
    `em_conv_routing` for convolutional connectivity.

    M-step, with `r[i, j] = R[i, j] a[i]` and `mass[j] = sum_i r[i, j] +
    epsilon`:

    - `mu[j] = sum_i r[i, j] V[i, j] / mass[j]`;
      `sigma2[j] = min_variance + sum_i r[i, j] (V[i, j] - mu[j])^2 /
      mass[j]` (per element `h`; `min_variance` is a floor added to every
      variance so identical votes give `log(min_variance)`, not `-inf`).
    - `mode="official"` follows the official code where the paper is
      silent: the new mean is blended with the previous one,
      `mu = 0.9 mu_new + 0.1 mu_prev` (the first with zero), the
      activation logit is `lambda (mass (-sum_h log sigma2_h - beta_v D
      (log(2 pi) + 1)) - 5000 beta_a)` with `D = pose_size`, and the
      inverse temperature of iteration `i` (from 0) is
      `lambda_i = final_lambda (1 - 0.95^(i + 1))`.
    - `mode="paper"` uses the forms of Procedure 1: the plain mean,
      `cost_h = (beta_v + log sigma_h) mass`, and the logit
      `lambda (beta_a - sum_h cost_h)`. The paper fixes no schedule for
      `lambda`; here it rises linearly, `lambda_i = final_lambda (i + 1) /
      iterations`, reaching `final_lambda` at the last iteration.
    - The parent activation is `sigmoid(logit)`.

    E-step (both modes), in the log domain:
    `log p[i, j] = log a[j] + log N(V[i, j]; mu[j], sigma2[j])`, with
    `log a[j] = log_sigmoid(logit[j])` (`keras.ops.log_sigmoid`, stable for
    logits of any size), and `R[i, :] = softmax(log p[i, :])` over the
    parents (the softmax subtracts the maximum first). No probability is
    ever exponentiated outside the softmax, so very distant votes cannot
    underflow every parent of a child to zero.

    The routing maths runs in `float32` for `float16`/`bfloat16` inputs
    (in the input dtype otherwise) and the results are cast back to the
    dtype of `votes`. `epsilon` (default `keras.config.epsilon()`, 1e-7)
    is added to every mass, so children that are all inactive give a
    finite mean of 0 and a variance of `min_variance` (the official code
    uses 1e-5 for its class capsules and 1e-7 for its convolutional ones).

    `**OFFICIAL_EM_CLASS_OPTIONS` reproduces the official class layer
    (google-research capsule_em, `update_em_routing`) to float precision:
    `iterations=3, final_lambda=0.0025, min_variance=5e-4, epsilon=1e-5,
    mode="official"`. The defaults differ from it in the iterations, the
    inverse temperature and the M-step (max pose difference 0.39 on random
    votes), and in the epsilon, which counts only where the activations
    are near 0 (docs/em_routing.md, "Against the official code").

    Paper: [Matrix capsules with EM routing](
    https://openreview.net/forum?id=HJWLfGWRb) (Hinton, Sabour & Frosst,
    ICLR 2018).

    Args:
        votes: Tensor of shape `(..., num_in, num_out, pose_size)`: the
            votes `V[i, j]` of every child for every parent (a flattened
            4x4 pose gives `pose_size=16`), with any leading (batch)
            dimensions.
        activations: Tensor of shape `(..., num_in)`, the child
            activations, in `[0, 1]`.
        beta_v: Tensor broadcastable to `(num_out,)`, the cost per unit of
            log standard deviation (`beta_v` of the paper).
        beta_a: Tensor broadcastable to `(num_out,)`, the activation
            threshold (`beta_a` of the paper).
        iterations: Positive integer, the number of routing iterations.
            Defaults to `2` (the paper and the official code use 3, which
            learned more slowly: docs/em_routing.md).
        final_lambda: Positive float, the inverse temperature `lambda`
            reached by the schedule. Defaults to `1e-3` (the official
            `final_beta` flag is 0.01).
        min_variance: Positive float, the floor added to every variance.
            Defaults to `5e-4` (the official `min_var`).
        epsilon: Optional positive float added to every mass. Defaults to
            `None`, which means `keras.config.epsilon()`.
        mode: `"official"` or `"paper"`, see above. Defaults to
            `"paper"`. `**OFFICIAL_EM_CLASS_OPTIONS` selects the official
            class layer's setting (see above).
        return_assignments: Boolean, whether to also return the assignment
            probabilities `R` used by the final M-step. Defaults to
            `False`.

    Returns:
        A tuple `(poses, activations)` of shapes `(..., num_out,
        pose_size)` and `(..., num_out)`: the parent means `mu` and the
        parent activations. With `return_assignments=True`, a tuple
        `(poses, activations, assignments)` where `assignments` has shape
        `(..., num_in, num_out)` and sums to 1 over `num_out`.

    Raises:
        ValueError: If an argument is out of range, if `votes` has rank
            below 3, or if `activations` or a beta does not match `votes`.

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
    - [Gritzman, Avoiding implementation pitfalls of "Matrix capsules with
      EM routing"](https://arxiv.org/abs/1907.00652) (2019)
    """
    options = _core.check_options(
        iterations, final_lambda, min_variance, epsilon, mode
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
    iterations=_DEFAULTS.iterations,
    final_lambda=_DEFAULTS.final_lambda,
    min_variance=_DEFAULTS.min_variance,
    epsilon=_DEFAULTS.epsilon,
    mode=_DEFAULTS.mode,
    normalization=_core.DEFAULT_NORMALIZATION,
    return_assignments=False,
):
    """EM routing between two convolutional grids of matrix capsules.

    The convolutional case of `em_routing`: the parents at output position
    `(i, j)` receive votes only from the children in the `kernel_size`
    window of the input grid that `extract_capsule_patches` gives that
    position. The M-step is the dense one applied per output position over
    its window. The paper does not say how the E-step treats a child that
    several overlapping windows see; `normalization` chooses:

    - `"official"` (default): the official code's intent. `R` starts at
      `1 / num_out` in every window, and the E-step normalises each
      output type separately over all the windows that contain the
      child, so a child's assignments sum to 1 per output type, `num_out`
      in all. The official code groups the overlapping window entries as
      if the stride were 1 (at stride 2 it pairs entries of different
      children); here they are grouped by the child they hold, at any
      stride. It learned fastest of the three (docs/em_routing.md).
      Against `"reference"`, on random votes with the official options
      otherwise, the poses differ by up to 0.35 at stride 1 and 1.5 at
      stride 2.
    - `"window"`: every window routes its own children, as the public
      ports that learn do. `R` starts at `1 / num_out` and the E-step is a
      softmax over the output types of the window; a child seen by `n`
      windows is `n` independent children. The cheapest of the three (no
      folds).
    - `"all_parents"`: a child's assignments are normalised over every
      parent it feeds, all output types at all positions whose window
      contains it, and start uniform over them, `1 / (num_out * n)` for a
      child in `n` windows (Gritzman 2019, third pitfall; the official
      code's later "fast" path normalises over the same set).
    - `"reference"`: the official code's own numerics
      (google-research capsule_em, `update_conv_routing`), to reproduce
      it: `R` starts at `1 / num_out`; the E-step subtracts from `log p`
      one maximum per (example, input type, output type), taken over all
      output positions and kernel offsets, and divides each `exp` by its
      group's sum plus `epsilon`, so that entries more than about
      `-log(epsilon)` below that maximum lose most of their assignment
      mass. The window entry at output position `p` and kernel offset `t`
      is grouped by `p + t` on each axis: the child at stride 1, entries
      of different children at stride 2. `**OFFICIAL_EM_OPTIONS` selects
      it with the rest of the official setting.

    Children in the zero padding of `"same"` have activation 0 and do not
    take part in the M-step. With `"reference"` they still take part in
    its maximum and sums, as if the padded grid were routed with
    `"valid"`.

    Stabilisation: the window softmax subtracts the maximum first. For
    `"official"` and `"all_parents"`, `log p` is shifted by the largest
    `log p` over the set it is normalised over before `exp`, so that set's
    largest term is exactly 1 and its sum at least 1. That maximum is
    computed without a dense child-by-parent tensor: folded onto the input
    grid as `fold_capsule_patches(reduction="max")` does and tiled back to
    the windows with one strided slice per kernel offset (cheaper to
    differentiate on CPU than a patch extraction); the sums of the shifted
    exponentials travel the same way, and the division uses `max(sum,
    epsilon)`. The shift is held out of the gradient
    (`keras.ops.stop_gradient`); the assignments do not depend on it.
    With `"reference"` they do: its shared shift and the `epsilon` added
    to the sums are part of what the official code computes, and the
    gradient flows through the maximum, as there.

    Memory grows with the votes, `(batch, out_h, out_w, kernel_h *
    kernel_w * num_in, num_out, pose_size)`: there is never a tensor over
    children times parent positions.

    Paper: [Matrix capsules with EM routing](
    https://openreview.net/forum?id=HJWLfGWRb) (Hinton, Sabour & Frosst,
    ICLR 2018).

    Args:
        votes: Tensor of shape `(batch, out_height, out_width, kernel_h *
            kernel_w * num_in, num_out, pose_size)`: for each output
            position, the votes of the children of its window in
            `(kernel row, kernel column, input type)` order (the order of
            `extract_capsule_patches` flattened) for every output type.
        activations: Tensor of shape `(batch, height, width, num_in)`, the
            child activations on the *input* grid, in `[0, 1]`.
        beta_v: Tensor broadcastable to `(num_out,)`, see `em_routing`.
        beta_a: Tensor broadcastable to `(num_out,)`, see `em_routing`.
        kernel_size: Positive integer or tuple of 2 positive integers, the
            window size.
        strides: Positive integer or tuple of 2 positive integers.
            Defaults to `1`.
        padding: `"valid"` or `"same"`. Defaults to `"valid"`.
        iterations: Positive integer. Defaults to `2`.
        final_lambda: Positive float. Defaults to `1e-3`.
        min_variance: Positive float. Defaults to `5e-4`.
        epsilon: Optional positive float. Defaults to `None`, which means
            `keras.config.epsilon()`.
        mode: `"official"` or `"paper"`, see `em_routing`. Defaults to
            `"paper"`; `**OFFICIAL_EM_OPTIONS` selects the official
            setting: `iterations=3, final_lambda=0.01,
            min_variance=5e-4, epsilon=1e-7, mode="official",
            normalization="reference"`, which reproduces the official
            convolutional routing to float precision.
        normalization: `"window"`, `"official"`, `"all_parents"` or
            `"reference"`, see above. Defaults to `"official"`.
        return_assignments: Boolean, whether to also return the assignment
            probabilities `R` used by the final M-step. Defaults to
            `False`.

    Returns:
        A tuple `(poses, activations)` of shapes `(batch, out_height,
        out_width, num_out, pose_size)` and `(batch, out_height,
        out_width, num_out)`. With `return_assignments=True`, also
        `assignments` of the shape of `votes` without `pose_size`.

    Raises:
        ValueError: If an argument is out of range, or if the shapes of
            `votes`, `activations` and the betas do not agree with the
            window geometry.

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
        iterations, final_lambda, min_variance, epsilon, mode
    )
    normalization = _core.check_normalization(normalization)
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
        normalization,
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
