"""EM routing between matrix capsules (Hinton, Sabour & Frosst 2018)."""

import math

import keras
import numpy as np
from keras import ops

from keras_capsules._validation import broadcasts_to
from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import check_positive_number
from keras_capsules._validation import normalize_padding
from keras_capsules._validation import normalize_pair
from keras_capsules.ops import _layout
from keras_capsules.ops._dtypes import compute_dtypes
from keras_capsules.ops._em_reductions import deviation_energy
from keras_capsules.ops._em_reductions import spread_children
from keras_capsules.ops._em_reductions import sum_children
from keras_capsules.ops._em_reductions import weighted_mean
from keras_capsules.ops._em_reductions import weighted_variance
from keras_capsules.ops._geometry import tiling
from keras_capsules.ops._softmax import softmax
from keras_capsules.ops.patches import _coverage_counts
from keras_capsules.ops.patches import _extract_tiles
from keras_capsules.ops.patches import _fold_tiles
from keras_capsules.ops.patches import _tile_by_slices

_EM_MODES = ("official", "paper")
# How a convolutional child's assignments are normalised in the E-step: over
# the output types of each window on its own, over each output type's
# overlapping windows (official), or over every parent (Gritzman 2019).
_EM_NORMALIZATIONS = ("window", "official", "all_parents")
_LOG_2PI = float(np.log(2.0 * np.pi))
# Constants of the official code (google-research/capsule_em): the
# activation cost scales beta_a by 5000, each new mean keeps 10% of the
# previous one, and the inverse temperature approaches final_lambda as
# 1 - 0.95^(i + 1).
_OFFICIAL_BETA_A_SCALE = 5000.0
_OFFICIAL_MEAN_MOMENTUM = 0.1
_OFFICIAL_LAMBDA_DECAY = 0.95


def em_routing(
    votes,
    activations,
    beta_v,
    beta_a,
    iterations=3,
    final_lambda=0.01,
    min_variance=5e-4,
    epsilon=None,
    mode="official",
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
            Defaults to `3`.
        final_lambda: Positive float, the inverse temperature `lambda`
            reached by the schedule. Defaults to `0.01` (the official
            `final_beta` flag).
        min_variance: Positive float, the floor added to every variance.
            Defaults to `5e-4` (the official `min_var`).
        epsilon: Optional positive float added to every mass. Defaults to
            `None`, which means `keras.config.epsilon()`.
        mode: `"official"` or `"paper"`, see above. Defaults to
            `"official"`.
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
    options = _check_em_options(
        iterations, final_lambda, min_variance, epsilon, mode
    )
    votes = ops.convert_to_tensor(votes)
    activations = ops.convert_to_tensor(activations)
    votes_shape = tuple(votes.shape)
    if len(votes_shape) < 3:
        raise ValueError(
            "Argument votes must have rank >= 3, with shape "
            "(..., num_in, num_out, pose_size). "
            f"Received: votes.shape={votes_shape}"
        )
    _check_activations_shape(tuple(activations.shape), votes_shape[:-2])
    return _em_routing(
        votes, activations, beta_v, beta_a, return_assignments, **options
    )


def _em_routing(
    votes,
    activations,
    beta_v,
    beta_a,
    return_assignments,
    **options,
):
    """`em_routing` on checked arguments."""
    options = _resolve_epsilon(options)
    dtype, compute_dtype = compute_dtypes(votes)
    votes = ops.cast(votes, compute_dtype)
    activations = ops.cast(activations, compute_dtype)
    num_out = votes.shape[-2]
    beta_v = _em_beta(beta_v, "beta_v", num_out, compute_dtype)
    beta_a = _em_beta(beta_a, "beta_a", num_out, compute_dtype)

    # R starts uniform over the parents (Procedure 1, line 2).
    assignments = ops.ones_like(votes[..., :1]) / num_out
    mean, logit, assignments = _em_iterations(
        votes,
        activations[..., None, None],
        beta_v,
        beta_a,
        assignments,
        normalize=lambda log_p: softmax(log_p, axis=-2),
        child_axis=-3,
        pose_axes=(-1,),
        **options,
    )
    poses = ops.cast(ops.squeeze(mean, axis=-3), dtype)
    probabilities = ops.cast(
        ops.sigmoid(ops.squeeze(logit, axis=(-3, -1))), dtype
    )
    if return_assignments:
        return poses, probabilities, ops.cast(assignments[..., 0], dtype)
    return poses, probabilities


def em_conv_routing(
    votes,
    activations,
    beta_v,
    beta_a,
    kernel_size,
    strides=1,
    padding="valid",
    iterations=3,
    final_lambda=0.01,
    min_variance=5e-4,
    epsilon=None,
    mode="official",
    normalization="official",
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
      stride. Measured on MNIST (docs/em_routing.md), all else equal: the
      paper's small network reached 93.3-94.2 % test accuracy after 600
      steps of 32 images with it, against 89.5-90.5 % with `"window"`.
    - `"window"`: every window routes its own children, as the public
      ports that learn do. `R` starts at `1 / num_out` and the E-step is a
      softmax over the output types of the window; a child seen by `n`
      windows is `n` independent children. The cheapest of the three (no
      folds): the small network trains about 14 % faster with it. With it
      the paper's small network reached 62 % test accuracy after 100
      steps, against 20 % with `"all_parents"`.
    - `"all_parents"`: a child's assignments are normalised over every
      parent it feeds, all output types at all positions whose window
      contains it, and start uniform over them, `1 / (num_out * n)` for a
      child in `n` windows (Gritzman 2019, third pitfall; the official
      code's later "fast" path normalises over the same set).

    Children in the zero padding of `"same"` have activation 0 and do not
    take part in the M-step.

    Stabilisation: the window softmax subtracts the maximum first. For the two
    overlapping normalisations, `log p` is shifted by the largest `log p`
    over the set it is normalised over before `exp`, so that set's largest
    term is exactly 1 and its sum at least 1. That maximum is computed
    without a dense child-by-parent tensor: folded onto the input grid
    as `fold_capsule_patches(reduction="max")` does and tiled back to the
    windows with one strided slice per kernel offset (cheaper to
    differentiate on CPU than a patch extraction); the sums of the
    shifted exponentials travel the same way, and the division uses
    `max(sum, epsilon)`. The shift is held out of the gradient
    (`keras.ops.stop_gradient`); the assignments do not depend on it.

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
        iterations: Positive integer. Defaults to `3`.
        final_lambda: Positive float. Defaults to `0.01`.
        min_variance: Positive float. Defaults to `5e-4`.
        epsilon: Optional positive float. Defaults to `None`, which means
            `keras.config.epsilon()`.
        mode: `"official"` or `"paper"`, see `em_routing`. Defaults to
            `"official"`.
        normalization: `"window"`, `"official"` or `"all_parents"`, see
            above. Defaults to `"official"`.
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
    options = _check_em_options(
        iterations, final_lambda, min_variance, epsilon, mode
    )
    normalization = check_option(
        normalization, "normalization", _EM_NORMALIZATIONS
    )
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
    return _em_conv_routing(
        votes,
        activations,
        beta_v,
        beta_a,
        geometry,
        children_first=False,
        return_assignments=return_assignments,
        normalization=normalization,
        **options,
    )


def _em_conv_routing(
    votes,
    activations,
    beta_v,
    beta_a,
    geometry,
    children_first,
    return_assignments,
    normalization="official",
    **options,
):
    """`em_conv_routing` on checked arguments and the `Tiling` of the
    windows, in one of two vote layouts.

    With `children_first=False`, `votes` is `(batch, out_h, out_w,
    children, num_out, pose_size)` as in `em_conv_routing`. With
    `children_first=True` it is `(children, batch, out_h, out_w, pose_rows,
    num_out, pose_cols)`, the layout in which a batched matmul over
    `(kernel row, kernel column, input type)` produces the votes
    (`EMConvCaps` with XLA): routing there reads the votes as they
    were written instead of through a transpose, and every sum over the
    children runs over the leading axis. Returns poses `(batch, out_h,
    out_w, num_out, pose_size)`, probabilities `(batch, out_h, out_w,
    num_out)` and, if asked, assignments `(batch, out_h, out_w, children,
    num_out)`.
    """
    options = _resolve_epsilon(options)
    num_in = activations.shape[3]
    kernel_h, kernel_w = geometry.kernel_size
    (out_h, out_w) = geometry.out_size
    num_children = kernel_h * kernel_w * num_in
    dtype, compute_dtype = compute_dtypes(votes)
    votes = ops.cast(votes, compute_dtype)
    if children_first:
        num_out = votes.shape[5]
        pose_size = votes.shape[4] * votes.shape[6]
        child_axis, parent_axis, pose_axes = 0, 5, (4, 6)
    else:
        num_out, pose_size = votes.shape[4:]
        child_axis, parent_axis, pose_axes = 3, 4, (5,)
    beta_v = _em_beta(beta_v, "beta_v", num_out, compute_dtype)
    beta_a = _em_beta(beta_a, "beta_a", num_out, compute_dtype)

    # Child-level tensors (no pose axes; a trailing parent-type axis of
    # size `types`, or none) come from the tiles (batch, out_h, out_w,
    # kernel_h, kernel_w, num_in * types) of `extract_capsule_patches`.
    def from_tiles(x, types=None):
        shape = (-1, out_h, out_w, num_children)
        x = ops.reshape(x, shape if types is None else shape + (types,))
        if children_first:
            x = ops.moveaxis(x, 3, 0)
        return x

    def with_pose_axes(x):
        # (child-level..., num_out) -> the routing layout.
        if children_first:
            return x[:, :, :, :, None, :, None]
        return x[..., None]

    def gather(x, reduction="sum"):
        # For every window entry and type, the `reduction` of `x` over all
        # the window entries that hold the same child; `x` has a trailing
        # type axis (of size 1 to gather over all types at once). Each
        # input type is its own channel of the grid: in the children-first
        # layout it joins the batch axis, and the kernel offsets stay in
        # front, so nothing is transposed.
        types = x.shape[-1]
        if children_first:
            tiles = ops.reshape(
                x, (kernel_h, kernel_w, -1, out_h, out_w, types)
            )
        else:
            tiles = ops.reshape(
                x, (-1, out_h, out_w, kernel_h, kernel_w, num_in * types)
            )
        folded = _fold_tiles(
            tiles, geometry, reduction, offsets_first=children_first
        )
        tiled = _tile_by_slices(folded, geometry, offsets_first=children_first)
        if children_first:
            return ops.reshape(tiled, (num_children, -1, out_h, out_w, types))
        return ops.reshape(tiled, (-1, out_h, out_w, num_children, types))

    child_activations = from_tiles(
        _extract_tiles(ops.cast(activations, compute_dtype), geometry)
    )
    ones = ops.ones_like(child_activations)[..., None] * ops.ones(
        (num_out,), compute_dtype
    )
    if normalization == "window":
        # Each window routes its own children: R starts at 1 / num_out and
        # the E-step is a softmax over the output types of the window.
        # Padding children have activation 0 and never count.
        initial = ones / num_out

        def normalize(log_p):
            return softmax(log_p, axis=parent_axis)

    else:
        # How many windows contain the child behind each window entry (0
        # for the zero padding). Static, so XLA folds it into a constant.
        counts = _extract_tiles(
            _coverage_counts(geometry, compute_dtype), geometry
        )
        counts = from_tiles(counts * ops.ones((num_in,), compute_dtype))
        counts = counts[..., None]
        real = ops.cast(counts > 0, compute_dtype)
        per_type = normalization == "official"
        if per_type:
            # The official start: 1 / num_out in every window.
            initial = ones * real / num_out
        else:
            # Uniform over every (position, type) parent of the child.
            initial = ones * real / (num_out * ops.maximum(counts, 1.0))
        fold_epsilon = options["epsilon"]

        def normalize(log_p):
            log_p = ops.squeeze(log_p, axis=pose_axes)
            local = (
                log_p if per_type else ops.amax(log_p, axis=-1, keepdims=True)
            )
            # In padding entries the folded maximum reads 0; the local
            # maximum still bounds their exponentials by 1.
            shift = ops.stop_gradient(ops.maximum(gather(local, "max"), local))
            exp = ops.exp(log_p - shift)
            summed = exp if per_type else ops.sum(exp, axis=-1, keepdims=True)
            total = ops.maximum(gather(summed), fold_epsilon)
            return with_pose_axes(exp / total * real)

    mean, logit, assignments = _em_iterations(
        votes,
        with_pose_axes(child_activations[..., None]),
        beta_v,
        beta_a,
        with_pose_axes(initial),
        normalize=normalize,
        child_axis=child_axis,
        pose_axes=pose_axes,
        **options,
    )
    if children_first:
        mean = ops.transpose(ops.squeeze(mean, axis=0), (0, 1, 2, 4, 3, 5))
    poses = ops.reshape(mean, (-1, out_h, out_w, num_out, pose_size))
    probabilities = ops.sigmoid(ops.reshape(logit, (-1, out_h, out_w, num_out)))
    poses = ops.cast(poses, dtype)
    probabilities = ops.cast(probabilities, dtype)
    if return_assignments:
        assignments = ops.squeeze(assignments, axis=pose_axes)
        if children_first:
            assignments = ops.transpose(assignments, (1, 2, 3, 0, 4))
        return poses, probabilities, ops.cast(assignments, dtype)
    return poses, probabilities


def _em_conv_capsules(
    poses,
    activations,
    kernel,
    beta_v,
    beta_a,
    kernel_size,
    strides,
    padding,
    normalization,
    options,
):
    """`EMConvCaps`: votes of every window, routed by `_em_conv_routing`.

    `poses` is `(batch, height, width, num_in, pose_size, pose_size)`,
    `kernel` `(kernel_h, kernel_w, num_in, num_out, pose_size, pose_size)`;
    arguments are checked. The votes are written in the layout that
    `_layout.children_first()` picks for this backend, and routed in it.
    Returns poses `(batch, out_h, out_w, num_out, pose_size, pose_size)`
    and activations `(batch, out_h, out_w, num_out)`.
    """
    geometry = tiling(tuple(poses.shape[1:3]), kernel_size, strides, padding)
    tiles = _extract_tiles(poses, geometry)
    _, out_h, out_w, kernel_h, kernel_w, num_in = tiles.shape[:6]
    pose_size = poses.shape[-1]
    num_out = kernel.shape[3]
    num_children = kernel_h * kernel_w * num_in
    # V = M W for every (kernel row, kernel column, input type, output
    # type), the official row-vector convention, as one batched matmul
    # over the children: rows (children, windows, ...) times kernels
    # (children, ..., num_out ...).
    rows = ops.transpose(tiles, (3, 4, 5, 0, 1, 2, 6, 7))
    children_first = _layout.children_first()
    if children_first:
        # With XLA the routing reads the votes in the layout the matmul
        # writes (children first): XLA then transposes neither the votes
        # for the routing nor their gradient for the matmul's backward
        # pass. EMConvCaps 14x14x32 -> 32, batch 16, 2-core CPU, training
        # img/s: JAX 15.5 against 6.3 with the equivalent einsum (whose
        # gradient XLA transposed), TensorFlow 0.9 s against 1.6 s per
        # step at batch 8 when it replaced positions-first votes.
        rows = ops.reshape(rows, (num_children, -1, pose_size))
        kernel = ops.reshape(
            ops.transpose(kernel, (0, 1, 2, 4, 3, 5)),
            (num_children, pose_size, num_out * pose_size),
        )
        votes_shape = (num_children, -1, out_h, out_w, pose_size)
        votes_shape += (num_out, pose_size)
    else:
        # PyTorch routes positions first, and `torch.compile` reads the
        # 16 pose elements of a vote 8 at a time only if they are
        # adjacent: each window's whole 4x4 pose is one matmul row
        # against the kernel spread over the pose rows (kron(I, W), 4x the
        # multiply-adds of a small matmul whose cost is writing the
        # votes), so that every (child, parent) pose is written in one
        # piece. EMConvCaps 14x14x32 -> 32, batch 16, compiled: 7.1
        # training img/s against 6.3 with the einsum whose output
        # interleaves the pose rows with the parents.
        rows = ops.reshape(rows, (num_children, -1, pose_size**2))
        eye = ops.eye(pose_size, dtype=kernel.dtype)
        kernel = ops.reshape(
            ops.einsum("sp,xyicqr->xyisqcpr", eye, kernel),
            (num_children, pose_size**2, num_out * pose_size**2),
        )
        votes_shape = (num_children, -1, out_h, out_w, num_out)
        votes_shape += (pose_size**2,)
    votes = ops.reshape(ops.matmul(rows, kernel), votes_shape)
    if not children_first:
        votes = ops.transpose(votes, (1, 2, 3, 0, 4, 5))
    out_poses, out_activations = _em_conv_routing(
        votes,
        activations,
        beta_v,
        beta_a,
        geometry,
        children_first=children_first,
        return_assignments=False,
        normalization=normalization,
        **options,
    )
    out_poses = ops.reshape(
        out_poses, (-1, out_h, out_w, num_out, pose_size, pose_size)
    )
    return out_poses, out_activations


def _em_iterations(
    votes,
    activations,
    beta_v,
    beta_a,
    assignments,
    normalize,
    child_axis,
    pose_axes,
    iterations,
    final_lambda,
    min_variance,
    epsilon,
    mode,
):
    """Runs the M- and E-steps; returns the last mean, logit and R.

    Every tensor has the rank of `votes`, whose `child_axis` holds the
    children, `pose_axes` the pose elements and one more axis the parents;
    `activations` and `assignments` have size 1 on the axes they lack
    (parents, pose), `beta_v` and `beta_a` broadcast along the parents.
    The mean and the logit keep the children axis with size 1, and the
    logit the pose axes too.
    """
    pose_size = math.prod([votes.shape[axis] for axis in pose_axes])
    num_in = votes.shape[child_axis]
    mean = None
    for iteration in range(iterations):
        if mode == "official":
            inverse_temperature = final_lambda * (
                1.0 - _OFFICIAL_LAMBDA_DECAY ** (iteration + 1)
            )
        else:
            inverse_temperature = final_lambda * (iteration + 1) / iterations

        # Procedure 1, M-step. Every sum over the children and every
        # parent statistic sent back to them goes through the helpers of
        # ops/_em_reductions.py: chunked sums with XLA, and gradients of
        # the three vote-sized steps written out so that the backward pass
        # keeps no vote-sized intermediate.
        weighted = assignments * activations
        mass = sum_children(weighted, child_axis) + epsilon
        weights = weighted / spread_children(mass, child_axis, num_in)
        new_mean = weighted_mean(weights, votes, child_axis)
        if mode == "paper":
            mean = new_mean
        elif mean is None:
            mean = (1.0 - _OFFICIAL_MEAN_MOMENTUM) * new_mean
        else:
            mean = (
                1.0 - _OFFICIAL_MEAN_MOMENTUM
            ) * new_mean + _OFFICIAL_MEAN_MOMENTUM * mean
        variance = min_variance + weighted_variance(
            weights, votes, mean, child_axis
        )
        sum_log_variance = ops.sum(
            ops.log(variance), axis=pose_axes, keepdims=True
        )
        if mode == "official":
            logit = inverse_temperature * (
                mass
                * (-sum_log_variance - beta_v * pose_size * (_LOG_2PI + 1.0))
                - _OFFICIAL_BETA_A_SCALE * beta_a
            )
        else:
            # sum_h cost_h with log sigma_h = log(sigma2_h) / 2.
            cost = mass * (pose_size * beta_v + 0.5 * sum_log_variance)
            logit = inverse_temperature * (beta_a - cost)
        if iteration == iterations - 1:
            break

        # Procedure 1, E-step, in the log domain so that distant votes
        # cannot underflow every parent of a child to zero.
        log_prior = ops.log_sigmoid(logit) - 0.5 * (
            pose_size * _LOG_2PI + sum_log_variance
        )
        log_p = spread_children(
            log_prior, child_axis, num_in
        ) - deviation_energy(votes, mean, variance, child_axis, pose_axes)
        assignments = normalize(log_p)
    return mean, logit, assignments


def _check_em_options(iterations, final_lambda, min_variance, epsilon, mode):
    # Checked in argument order, so the first bad argument is reported.
    return {
        "iterations": check_positive_int(iterations, "iterations"),
        "final_lambda": check_positive_number(final_lambda, "final_lambda"),
        "min_variance": check_positive_number(min_variance, "min_variance"),
        # None is resolved when the routing runs (`_resolve_epsilon`), so
        # that a layer follows `keras.config.set_epsilon` as the op does.
        "epsilon": None
        if epsilon is None
        else check_positive_number(epsilon, "epsilon"),
        "mode": check_option(mode, "mode", _EM_MODES),
    }


def _resolve_epsilon(options):
    """`options` with `epsilon=None` replaced by `keras.config.epsilon()`."""
    if options["epsilon"] is not None:
        return options
    return {**options, "epsilon": float(keras.config.epsilon())}


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


def _em_beta(beta, name, num_out, dtype):
    """`beta` checked and cast, as a column: in every routing layout the
    parents axis is followed by a (pose) axis of size 1."""
    beta = ops.cast(beta, dtype)
    shape = tuple(beta.shape)
    if not broadcasts_to(shape, (num_out,)):
        raise ValueError(
            f"Argument {name} must broadcast to (num_out,) = ({num_out},). "
            f"Received: {name}.shape={shape}"
        )
    return ops.reshape(beta, (-1, 1))
