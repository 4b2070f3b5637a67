"""Kernel tiles of capsule grids, their transpose, and coordinate addition.

Convolutional capsule layers with EM routing (Hinton et al. 2018) connect
each output position to a `kernel_size` window of input capsules. These
helpers move between a capsule grid `(batch, height, width, ...)` and its
kernel tiles `(batch, out_height, out_width, kernel_h, kernel_w, ...)`:
`extract_capsule_patches` gathers the tiles and `fold_capsule_patches` is
its transpose, sending every tile entry back to the input position it came
from. `coordinate_grid` and `add_coordinates` implement the paper's
coordinate addition for the class capsules.
"""

import math

from keras import ops

from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import check_positive_number
from keras_capsules._validation import normalize_padding
from keras_capsules._validation import normalize_pair
from keras_capsules.ops import _tiles
from keras_capsules.ops._tiles import tiling

PLACEMENTS = ("official", "paper")
_REDUCTIONS = ("sum", "max")


def extract_capsule_patches(inputs, kernel_size, strides=1, padding="valid"):
    """Extracts the kernel tiles of a capsule grid.

    Every output position `(i, j)` receives the `kernel_size` window of the
    input grid that starts at `(i * strides[0], j * strides[1])` of the
    (padded) input, with every trailing capsule axis kept intact. Poses
    `(batch, H, W, capsules, 4, 4)` and activations `(batch, H, W,
    capsules)` use the same call and get tiles that line up entry by entry.

    The tiles come from `keras.ops.image.extract_patches`. To keep its
    identity kernel at `kernel_h * kernel_w` channels instead of
    `(kernel_h * kernel_w * channels)^2`, the trailing axes are moved into
    the batch, each one is tiled as a single-channel image, and the result
    is moved back. `"same"` padding follows the TensorFlow convention
    (output size `ceil(size / stride)`, the extra row or column at the end)
    and pads with zeros explicitly, so every backend agrees.

    Args:
        inputs: Tensor of shape `(batch, height, width, ...)` with a
            static `height`, `width` and trailing shape.
        kernel_size: Positive integer or tuple of 2 positive integers,
            the tile height and width.
        strides: Positive integer or tuple of 2 positive integers, the
            step between tiles. Defaults to `1`.
        padding: `"valid"` or `"same"`. Defaults to `"valid"`.

    Returns:
        Tensor of shape `(batch, out_height, out_width, kernel_h, kernel_w,
        ...)` where `out[b, i, j, u, v] = padded[b, i * strides[0] + u,
        j * strides[1] + v]`.

    Raises:
        ValueError: If `inputs` has rank below 3 or undefined non-batch
            dimensions, if an argument is invalid, or if the kernel leaves
            no output positions.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> poses = np.random.rand(2, 6, 6, 8, 4, 4).astype("float32")
    >>> tiles = keras_capsules.ops.extract_capsule_patches(
    ...     poses, kernel_size=3, strides=2
    ... )
    >>> tuple(tiles.shape)
    (2, 2, 2, 3, 3, 8, 4, 4)
    """
    inputs = ops.convert_to_tensor(inputs)
    shape = tuple(inputs.shape)
    _check_static(shape, 3, "inputs", "(batch, height, width, ...)")
    kernel_size = normalize_pair(kernel_size, "kernel_size")
    strides = normalize_pair(strides, "strides")
    padding = normalize_padding(padding)
    return _tiles.extract_tiles(
        inputs, tiling((shape[1], shape[2]), kernel_size, strides, padding)
    )


def fold_capsule_patches(
    patches, grid_size, strides=1, padding="valid", reduction="sum"
):
    """Sends kernel tiles back onto the capsule grid they came from.

    The transpose of `extract_capsule_patches`: every tile entry
    `patches[b, i, j, u, v]` lands on the input position
    `(i * strides[0] + u, j * strides[1] + v)` (minus the padding), and the
    entries that land on one position are combined with `reduction`. With
    `"sum"` this is the adjoint of the extraction, so
    `sum(extract(x) * p) == sum(x * fold(p))`: the fold with which EM
    routing adds up each child capsule's assignment mass over every parent
    whose receptive field contains it. With `"max"` it gives each child the
    largest entry among all the tiles that contain it.

    It is written as `kernel_h * kernel_w` strided shift-and-accumulate
    steps on the input grid (one per kernel offset), never as a dense
    child-by-parent tensor, and is differentiable. Input positions that no
    tile covers (padding, or the last rows of a `"valid"` grid whose size
    does not fit the strides) receive 0.

    Args:
        patches: Tensor of shape `(batch, out_height, out_width, kernel_h,
            kernel_w, ...)` with static non-batch dimensions.
        grid_size: Tuple of 2 positive integers `(height, width)`, the size
            of the grid the tiles were extracted from.
        strides: Positive integer or tuple of 2 positive integers, the
            strides used for the extraction. Defaults to `1`.
        padding: `"valid"` or `"same"`, the padding used for the
            extraction. Defaults to `"valid"`.
        reduction: `"sum"` or `"max"`, how entries landing on the same
            position combine. Defaults to `"sum"`.

    Returns:
        Tensor of shape `(batch, height, width, ...)`.

    Raises:
        ValueError: If an argument is invalid, or if the shape of `patches`
            does not match `grid_size`, `strides` and `padding`.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> ones = np.ones((1, 2, 2, 3, 3, 1), "float32")
    >>> counts = keras_capsules.ops.fold_capsule_patches(
    ...     ones, grid_size=(5, 5), strides=2
    ... )
    >>> tuple(counts.shape)
    (1, 5, 5, 1)
    """
    patches = ops.convert_to_tensor(patches)
    shape = tuple(patches.shape)
    _check_static(
        shape,
        5,
        "patches",
        "(batch, out_height, out_width, kernel_h, kernel_w, ...)",
    )
    grid_size = normalize_pair(grid_size, "grid_size", allow_int=False)
    strides = normalize_pair(strides, "strides")
    padding = normalize_padding(padding)
    check_option(reduction, "reduction", _REDUCTIONS)
    kernel_size = shape[3:5]
    trailing = shape[5:]
    geometry = tiling(grid_size, kernel_size, strides, padding)
    (out_h, out_w) = geometry.out_size
    if shape[1:3] != (out_h, out_w):
        raise ValueError(
            "Argument patches does not match grid_size, strides and "
            f"padding: expected {out_h}x{out_w} tiles of size "
            f"{tuple(kernel_size)} for grid_size={tuple(grid_size)}, "
            f"strides={tuple(strides)}, padding={padding!r}. "
            f"Received: patches.shape={shape}"
        )
    channels = math.prod(trailing)
    tiles = ops.reshape(
        patches, (-1, out_h, out_w) + tuple(kernel_size) + (channels,)
    )
    folded = _tiles.fold_tiles(tiles, geometry, reduction, _tiles.OFFSETS_LAST)
    folded = ops.reshape(folded, (-1,) + grid_size + trailing)
    return folded


def coordinate_grid(height, width, coordinate_scale=None, dtype="float32"):
    """Returns the (row, column) coordinates of a grid's cell centres.

    Used by coordinate addition (Hinton et al. 2018, Section 3.1): the
    class capsules add the position of each input capsule's receptive
    field to its votes, so that the shared transforms keep where a part
    was. A layer does not know the geometry of the network below it, so
    by default the coordinates are normalised cell centres,
    `((i + 0.5) / height, (j + 0.5) / width)`, in `(0, 1)`. The official
    code instead uses pixel coordinates of receptive-field centres divided
    by 100; pass `coordinate_scale` to use `((i + 0.5) * coordinate_scale,
    (j + 0.5) * coordinate_scale)` instead (for instance the total stride
    in pixels divided by 100).

    Args:
        height: Positive integer, the number of grid rows.
        width: Positive integer, the number of grid columns.
        coordinate_scale: Optional positive float, the distance between
            neighbouring cell centres. Defaults to `None` (normalised).
        dtype: The dtype of the result. Defaults to `"float32"`.

    Returns:
        Tensor of shape `(height, width, 2)`: `[..., 0]` is the row
        coordinate and `[..., 1]` the column coordinate.

    Raises:
        ValueError: If `height`, `width` or `coordinate_scale` is not
            positive.

    Example:

    >>> import keras_capsules
    >>> grid = keras_capsules.ops.coordinate_grid(4, 4)
    >>> tuple(grid.shape)
    (4, 4, 2)
    """
    height = check_positive_int(height, "height")
    width = check_positive_int(width, "width")
    coordinate_scale = check_positive_number(
        coordinate_scale, "coordinate_scale", allow_none=True
    )
    rows = ops.arange(height, dtype="float32") + 0.5
    cols = ops.arange(width, dtype="float32") + 0.5
    if coordinate_scale is None:
        rows = rows / height
        cols = cols / width
    else:
        rows = rows * coordinate_scale
        cols = cols * coordinate_scale
    grid = ops.stack(
        [
            ops.broadcast_to(rows[:, None], (height, width)),
            ops.broadcast_to(cols[None, :], (height, width)),
        ],
        axis=-1,
    )
    return ops.cast(grid, dtype)


def add_coordinates(
    votes, coordinate_placement="official", coordinate_scale=None
):
    """Adds each position's (row, column) coordinate to its pose votes.

    Coordinate addition (Hinton et al. 2018, Section 3.1). The votes of
    every input capsule at grid position `(i, j)` get the row coordinate
    added to one pose element and the column coordinate to another, with
    the coordinates of `coordinate_grid(height, width, coordinate_scale)`:

    - `"official"`: the first two elements of the flattened pose,
      `pose[0, 0]` and `pose[0, 1]`, as the official code does.
    - `"paper"`: the first two elements of the right-hand column,
      `pose[0, -1]` and `pose[1, -1]`, as the paper describes.

    Args:
        votes: Tensor of shape `(batch, height, width, ..., pose_height,
            pose_width)` with static `height`, `width` and pose shape, for
            example `(batch, height, width, capsules_in, classes, 4, 4)`.
        coordinate_placement: `"official"` or `"paper"`. Defaults to
            `"official"`.
        coordinate_scale: Optional positive float, see `coordinate_grid`.
            Defaults to `None` (normalised cell centres).

    Returns:
        Tensor of the shape and dtype of `votes`.

    Raises:
        ValueError: If `coordinate_placement` is unknown, if `votes` has
            rank below 5 or undefined dimensions, or if the pose is too
            small for the placement.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> votes = np.zeros((2, 3, 3, 8, 5, 4, 4), "float32")
    >>> votes = keras_capsules.ops.add_coordinates(
    ...     votes, coordinate_placement="paper"
    ... )
    >>> tuple(votes.shape)
    (2, 3, 3, 8, 5, 4, 4)
    """
    check_option(coordinate_placement, "coordinate_placement", PLACEMENTS)
    votes = ops.convert_to_tensor(votes)
    shape = tuple(votes.shape)
    _check_static(
        shape,
        5,
        "votes",
        "(batch, height, width, ..., pose_height, pose_width)",
    )
    height, width = shape[1], shape[2]
    pose_h, pose_w = shape[-2], shape[-1]
    if coordinate_placement == "official":
        row_at, col_at = (0, 0), (0, 1)
        too_small = pose_w < 2
    else:
        row_at, col_at = (0, pose_w - 1), (1, pose_w - 1)
        too_small = pose_h < 2
    if too_small:
        raise ValueError(
            f"A {pose_h}x{pose_w} pose has no room for the two coordinates "
            f'of coordinate_placement "{coordinate_placement}". '
            f"Received: votes.shape={shape}"
        )
    grid = coordinate_grid(height, width, coordinate_scale, votes.dtype)
    offsets = grid[:, :, 0, None, None] * _one_hot_matrix(
        row_at, (pose_h, pose_w), votes.dtype
    ) + grid[:, :, 1, None, None] * _one_hot_matrix(
        col_at, (pose_h, pose_w), votes.dtype
    )
    middle = len(shape) - 5
    offsets = ops.reshape(
        offsets, (1, height, width) + (1,) * middle + (pose_h, pose_w)
    )
    return votes + offsets


def _one_hot_matrix(index, shape, dtype):
    """A `shape` matrix of zeros with a one at `index`."""
    flat = index[0] * shape[1] + index[1]
    hot = ops.one_hot(flat, shape[0] * shape[1], dtype=dtype)
    return ops.reshape(hot, shape)


def _check_static(shape, min_rank, name, layout):
    if len(shape) < min_rank or any(d is None for d in shape[1:]):
        raise ValueError(
            f"Argument {name} must have rank >= {min_rank} with shape "
            f"{layout} and static non-batch dimensions. "
            f"Received: {name}.shape={shape}"
        )
