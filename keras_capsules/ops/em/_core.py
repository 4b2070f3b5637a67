"""The EM routing core that both public EM ops and both EM layers run.

One M-step, E-step and activation (`iterate`), the routing of dense votes
(`route_dense`) and of convolutional windows (`route_conv`, in either
vote layout of `_vote_layouts`), the routing options with their defaults,
and their checks. Arguments arrive checked; the public front door is
`ops/em/__init__.py`, whose docstrings give the equations.
"""

import collections
import math

import keras
import numpy as np
from keras import ops

from keras_capsules._validation import broadcasts_to
from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import check_positive_number
from keras_capsules.ops import _tiles
from keras_capsules.ops._dtypes import compute_dtypes
from keras_capsules.ops._softmax import softmax
from keras_capsules.ops.em._reductions import deviation_energy
from keras_capsules.ops.em._reductions import spread_children
from keras_capsules.ops.em._reductions import sum_children
from keras_capsules.ops.em._reductions import weighted_mean
from keras_capsules.ops.em._reductions import weighted_variance

MODES = ("official", "paper")
# How a convolutional child's assignments are normalised in the E-step: over
# the output types of each window on its own, over each output type's
# overlapping windows (official), over every parent (Gritzman 2019), or
# with the official code's own numerics (reference).
NORMALIZATIONS = ("window", "official", "all_parents", "reference")

# The routing options, checked once by whoever receives them, under the
# argument names of the ops and the layers alike.
Options = collections.namedtuple(
    "Options",
    [
        "routing_iterations",
        "final_lambda",
        "min_variance",
        "epsilon",
        "routing_mode",
    ],
)
# The defaults of the ops and the layers alike: the setting that learns
# (docs/design/em_routing_defaults.md). `epsilon=None` follows
# `keras.config.epsilon()` when the routing runs.
DEFAULTS = Options(
    routing_iterations=2,
    final_lambda=1e-3,
    min_variance=5e-4,
    epsilon=None,
    routing_mode="paper",
)
DEFAULT_NORMALIZATION = "official"

_LOG_2PI = float(np.log(2.0 * np.pi))
# Constants of the official code: the activation cost scales beta_a by
# 5000, each new mean keeps 10% of the previous one, and the inverse
# temperature approaches final_lambda as 1 - 0.95^(i + 1).
OFFICIAL_BETA_A_SCALE = 5000.0
OFFICIAL_MEAN_MOMENTUM = 0.1
OFFICIAL_LAMBDA_DECAY = 0.95


def check_options(
    routing_iterations, final_lambda, min_variance, epsilon, routing_mode
):
    """The checked `Options`, checked in argument order, so the first bad
    argument is reported."""
    return Options(
        routing_iterations=check_positive_int(
            routing_iterations, "routing_iterations"
        ),
        final_lambda=check_positive_number(final_lambda, "final_lambda"),
        min_variance=check_positive_number(min_variance, "min_variance"),
        epsilon=check_positive_number(epsilon, "epsilon", allow_none=True),
        routing_mode=check_option(routing_mode, "routing_mode", MODES),
    )


def check_normalization(routing_normalization):
    return check_option(
        routing_normalization, "routing_normalization", NORMALIZATIONS
    )


def resolve_epsilon(epsilon):
    """`epsilon`, or `keras.config.epsilon()` if it is `None`.

    Resolved when the routing runs, so that a layer follows
    `keras.config.set_epsilon` as the op does.
    """
    if epsilon is not None:
        return epsilon
    return float(keras.config.epsilon())


def check_beta(beta, name, num_out, dtype):
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


def route_dense(
    votes, activations, beta_v, beta_a, options, return_assignments=False
):
    """`em_routing` on checked arguments and `Options`."""
    dtype, compute_dtype = compute_dtypes(votes)
    votes = ops.cast(votes, compute_dtype)
    activations = ops.cast(activations, compute_dtype)
    num_out = votes.shape[-2]
    beta_v = check_beta(beta_v, "beta_v", num_out, compute_dtype)
    beta_a = check_beta(beta_a, "beta_a", num_out, compute_dtype)

    # R starts uniform over the parents (Procedure 1, line 2).
    assignments = ops.ones_like(votes[..., :1]) / num_out
    mean, logit, assignments = iterate(
        votes,
        activations[..., None, None],
        beta_v,
        beta_a,
        assignments,
        normalize=lambda log_p: softmax(log_p, axis=-2),
        child_axis=-3,
        pose_axes=(-1,),
        options=options,
    )
    poses = ops.cast(ops.squeeze(mean, axis=-3), dtype)
    probabilities = ops.cast(
        ops.sigmoid(ops.squeeze(logit, axis=(-3, -1))), dtype
    )
    if return_assignments:
        return poses, probabilities, ops.cast(assignments[..., 0], dtype)
    return poses, probabilities


def route_conv(
    votes,
    activations,
    beta_v,
    beta_a,
    layout,
    routing_normalization,
    options,
    return_assignments=False,
):
    """`em_conv_routing` on checked arguments, with votes in `layout`.

    `layout` (`_vote_layouts.ChildrenFirst` or
    `_vote_layouts.PositionsFirst`) holds the `Tiling` of the windows and
    knows the axes of `votes`; the child activations are on the input
    grid. Returns poses `(batch, out_h, out_w, num_out, pose_size)`,
    probabilities `(batch, out_h, out_w, num_out)` and, if asked,
    assignments `(batch, out_h, out_w, children, num_out)`.
    """
    geometry = layout.geometry
    out_h, out_w = geometry.out_size
    dtype, compute_dtype = compute_dtypes(votes)
    votes = ops.cast(votes, compute_dtype)
    num_out, _ = layout.parents(votes)
    beta_v = check_beta(beta_v, "beta_v", num_out, compute_dtype)
    beta_a = check_beta(beta_a, "beta_a", num_out, compute_dtype)
    parent_axis, pose_axes = layout.parent_axis, layout.pose_axes

    def gather(x, reduction="sum"):
        # For every window entry and type, the `reduction` of `x` over all
        # the window entries that hold the same child; `x` has a trailing
        # type axis (of size 1 to gather over all types at once).
        order = layout.tile_order
        folded = _tiles.fold_tiles(layout.tiles(x), geometry, reduction, order)
        tiled = _tiles.tile_by_slices(folded, geometry, order)
        return layout.from_tiles(tiled, x.shape[-1])

    child_activations = layout.children(
        _tiles.extract_tiles(ops.cast(activations, compute_dtype), geometry)
    )
    ones = ops.ones_like(child_activations)[..., None] * ops.ones(
        (num_out,), compute_dtype
    )
    if routing_normalization == "window":
        # Each window routes its own children: R starts at 1 / num_out and
        # the E-step is a softmax over the output types of the window.
        # Padding children have activation 0 and never count.
        initial = ones / num_out

        def normalize(log_p):
            return softmax(log_p, axis=parent_axis)

    elif routing_normalization == "reference":
        initial = ones / num_out
        grouping = reference_grouping(geometry)
        order = layout.tile_order
        reference_epsilon = resolve_epsilon(options.epsilon)

        def normalize(log_p):
            # As google-research capsule_em `update_conv_routing`: one shift
            # per (example, input type, output type), the largest log_p of
            # all positions and offsets, and the epsilon added to the sums,
            # so that entries far below that maximum lose assignment mass.
            # The gradient flows through the maximum, as there.
            log_p = ops.squeeze(log_p, axis=pose_axes)
            tiles = layout.tiles(log_p)
            exp = ops.exp(
                tiles - ops.amax(tiles, axis=order.window_axes, keepdims=True)
            )
            folded = _tiles.fold_tiles(exp, grouping, "sum", order)
            total = _tiles.tile_by_slices(folded, grouping, order)
            assignments = exp / (total + reference_epsilon)
            return layout.with_pose_axes(
                layout.from_tiles(assignments, log_p.shape[-1])
            )

    else:
        # How many windows contain the child behind each window entry (0
        # for the zero padding). Static, so XLA folds it into a constant.
        counts = _tiles.extract_tiles(
            _tiles.coverage_counts(geometry, compute_dtype), geometry
        )
        counts = layout.children(
            counts * ops.ones((layout.num_in,), compute_dtype)
        )
        counts = counts[..., None]
        real = ops.cast(counts > 0, compute_dtype)
        per_type = routing_normalization == "official"
        if per_type:
            # The official start: 1 / num_out in every window.
            initial = ones * real / num_out
        else:
            # Uniform over every (position, type) parent of the child.
            initial = ones * real / (num_out * ops.maximum(counts, 1.0))
        fold_epsilon = resolve_epsilon(options.epsilon)

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
            return layout.with_pose_axes(exp / total * real)

    mean, logit, assignments = iterate(
        votes,
        layout.with_pose_axes(child_activations[..., None]),
        beta_v,
        beta_a,
        layout.with_pose_axes(initial),
        normalize=normalize,
        child_axis=layout.child_axis,
        pose_axes=pose_axes,
        options=options,
    )
    poses = ops.cast(layout.poses(mean), dtype)
    probabilities = ops.sigmoid(ops.reshape(logit, (-1, out_h, out_w, num_out)))
    probabilities = ops.cast(probabilities, dtype)
    if return_assignments:
        assignments = ops.cast(layout.assignments(assignments), dtype)
        return poses, probabilities, assignments
    return poses, probabilities


def reference_grouping(geometry):
    """The `Tiling` by which `routing_normalization="reference"` sums window
    entries: google-research capsule_em groups the entry at output
    position `p` and kernel offset `t` by `p + t`, as if the stride were 1
    and nothing were padded, so at stride 2 it pairs entries of different
    children. That is a stride-1 valid tiling of a grid of `out_size +
    kernel_size - 1`, with the same output size and kernel."""
    grid_size = tuple(
        out + kernel - 1
        for out, kernel in zip(geometry.out_size, geometry.kernel_size)
    )
    return _tiles.tiling(grid_size, geometry.kernel_size, (1, 1), "valid")


def iterate(
    votes,
    activations,
    beta_v,
    beta_a,
    assignments,
    normalize,
    child_axis,
    pose_axes,
    options,
):
    """Runs the M- and E-steps; returns the last mean, logit and R.

    Every tensor has the rank of `votes`, whose `child_axis` holds the
    children, `pose_axes` the pose elements and one more axis the parents;
    `activations` and `assignments` have size 1 on the axes they lack
    (parents, pose), `beta_v` and `beta_a` broadcast along the parents.
    The mean and the logit keep the children axis with size 1, and the
    logit the pose axes too.
    """
    iterations, final_lambda, min_variance, epsilon, mode = options
    epsilon = resolve_epsilon(epsilon)
    pose_size = math.prod([votes.shape[axis] for axis in pose_axes])
    num_in = votes.shape[child_axis]
    mean = None
    for iteration in range(iterations):
        if mode == "official":
            inverse_temperature = final_lambda * (
                1.0 - OFFICIAL_LAMBDA_DECAY ** (iteration + 1)
            )
        else:
            inverse_temperature = final_lambda * (iteration + 1) / iterations

        # Procedure 1, M-step. Every sum over the children and every
        # parent statistic sent back to them goes through the helpers of
        # ops/em/_reductions.py: chunked sums with XLA, and gradients of
        # the three vote-sized steps written out so that the backward pass
        # keeps no vote-sized intermediate.
        weighted = assignments * activations
        mass = sum_children(weighted, child_axis) + epsilon
        weights = weighted / spread_children(mass, child_axis, num_in)
        new_mean = weighted_mean(weights, votes, child_axis)
        if mode == "paper":
            mean = new_mean
        elif mean is None:
            mean = (1.0 - OFFICIAL_MEAN_MOMENTUM) * new_mean
        else:
            mean = (
                1.0 - OFFICIAL_MEAN_MOMENTUM
            ) * new_mean + OFFICIAL_MEAN_MOMENTUM * mean
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
                - OFFICIAL_BETA_A_SCALE * beta_a
            )
        else:
            # sum_h cost_h with log sigma_h = log(sigma2_h) / 2. The
            # routed tensors come first: the betas may be backend arrays,
            # which cannot take a symbolic tensor as right-hand operand.
            cost = mass * (0.5 * sum_log_variance + pose_size * beta_v)
            logit = inverse_temperature * (-cost + beta_a)
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
