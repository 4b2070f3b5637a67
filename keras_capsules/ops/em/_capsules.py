"""The computations of the two EM layers: votes, then the shared EM core.

`EMConvCaps` and `EMClassCaps` are thin wrappers over `conv_capsules` and
`class_capsules`; both compute their votes here and route them with
`_core`, as the public ops `em_conv_routing` and `em_routing` do.
Arguments arrive checked.
"""

from keras import ops

from keras_capsules.ops import _tiles
from keras_capsules.ops._tiles import tiling
from keras_capsules.ops.em import _core
from keras_capsules.ops.em._vote_layouts import vote_layout
from keras_capsules.ops.patches import add_coordinates


def conv_capsules(
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
    """Convolutional matrix capsules: `V = M W` for every window entry,
    routed by EM over the windows.

    `poses` is `(batch, height, width, num_in, pose_size, pose_size)`,
    `kernel` `(kernel_h, kernel_w, num_in, num_out, pose_size,
    pose_size)`. The votes are written and routed in the layout that
    `_vote_layouts.vote_layout` gives for this backend. Returns poses
    `(batch, out_h, out_w, num_out, pose_size, pose_size)` and activations
    `(batch, out_h, out_w, num_out)`.
    """
    geometry = tiling(tuple(poses.shape[1:3]), kernel_size, strides, padding)
    layout = vote_layout(geometry, poses.shape[3])
    votes = layout.votes(_tiles.extract_tiles(poses, geometry), kernel)
    out_poses, out_activations = _core.route_conv(
        votes, activations, beta_v, beta_a, layout, normalization, options
    )
    (out_h, out_w), pose_size = geometry.out_size, poses.shape[-1]
    out_poses = ops.reshape(
        out_poses, (-1, out_h, out_w, kernel.shape[3], pose_size, pose_size)
    )
    return out_poses, out_activations


def class_capsules(
    poses,
    activations,
    kernel,
    beta_v,
    beta_a,
    coordinate_addition,
    coordinate_placement,
    coordinate_scale,
    options,
):
    """Class capsules: `V = M W` with one `W` per (input type, class),
    shared by positions, optional coordinate addition, and dense EM
    routing of every input capsule.

    `poses` is `(batch, height, width, num_in, pose_size, pose_size)`,
    `kernel` `(num_in, num_classes, pose_size, pose_size)`. Returns poses
    `(batch, num_classes, pose_size, pose_size)` and activations `(batch,
    num_classes)`.
    """
    _, height, width, num_in, pose_size, _ = poses.shape
    num_classes = kernel.shape[1]
    votes = ops.einsum("bhwipq,icqr->bhwicpr", poses, kernel)
    if coordinate_addition:
        votes = add_coordinates(votes, coordinate_placement, coordinate_scale)
    num_children = height * width * num_in
    votes = ops.reshape(
        votes, (-1, num_children, num_classes, pose_size * pose_size)
    )
    class_poses, class_activations = _core.route_dense(
        votes,
        ops.reshape(activations, (-1, num_children)),
        beta_v,
        beta_a,
        options,
    )
    class_poses = ops.reshape(
        class_poses, (-1, num_classes, pose_size, pose_size)
    )
    return class_poses, class_activations
