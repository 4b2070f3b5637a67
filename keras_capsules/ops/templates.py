"""Affine warping of templates onto a canvas, differentiable with respect
to the transforms on every backend (Stacked Capsule Autoencoders)."""

import numpy as np
from keras import ops

from keras_capsules._validation import check_int_tuple
from keras_capsules._validation import check_pose_params
from keras_capsules.ops._backend import gathers_per_example
from keras_capsules.ops._backend import keeps_sampling_intermediates
from keras_capsules.ops._dtypes import compute_dtypes
from keras_capsules.ops._dtypes import matmul


def affine_sampling_grid(transforms, output_size, source_size):
    """Where each canvas pixel samples a template, for affine poses.

    A pose `[[a, b, tx], [c, d, ty]]` (see
    `keras_capsules.ops.geometric_transform`) maps template coordinates to
    canvas coordinates, both normalised so that the centres of the first
    and last pixels of each axis sit at -1 and 1. Each canvas pixel is
    taken back through the inverse transform,

        u = A^-1 (p - t),    A = [[a, b], [c, d]],  t = (tx, ty),

    with `p = (x, y)` the pixel's normalised coordinates
    (`x = -1 + 2 col / (width - 1)`, `y` likewise for the rows), and
    `u` is turned into template pixel coordinates,
    `(u_x + 1) (w - 1) / 2` and `(u_y + 1) (h - 1) / 2`. This is the
    inverse affine grid warper of the official code (Sonnet 1's
    `AffineGridWarper(canvas, template).inverse()`).

    Args:
        transforms: Tensor of shape `(..., 6)`, the affine transforms
            `(a, b, tx, c, d, ty)`. Their matrices `A` must be invertible
            (poses from `geometric_transform` always are).
        output_size: Tuple `(height, width)` of the canvas.
        source_size: Tuple `(h, w)` of the templates.

    Returns:
        A tensor of shape `(..., height, width, 2)`: the `(x, y)` template
        pixel coordinates (column first) for every canvas pixel.

    Raises:
        ValueError: If the last axis of `transforms` is not 6, or a size is
            not a pair of positive integers.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> identity = np.array([[1.0, 0.0, 0.0, 0.0, 1.0, 0.0]], "float32")
    >>> grid = keras_capsules.ops.affine_sampling_grid(
    ...     identity, output_size=(3, 3), source_size=(5, 5)
    ... )
    >>> np.asarray(grid)[0, 1, :, 0].tolist()
    [0.0, 2.0, 4.0]
    """
    output_size = check_int_tuple(output_size, "output_size", length=2)
    source_size = check_int_tuple(source_size, "source_size", length=2)
    transforms = ops.convert_to_tensor(transforms)
    check_pose_params(transforms.shape, "transforms")
    dtype, compute_dtype = compute_dtypes(transforms)
    x, y = _source_points(
        ops.cast(transforms, compute_dtype), output_size, source_size
    )
    grid = ops.stack([x, y], axis=-1)
    batch_shape = tuple(ops.shape(transforms)[:-1])
    grid = ops.reshape(grid, batch_shape + output_size + (2,))
    return ops.cast(grid, dtype)


def _source_points(transforms, output_size, source_size):
    """The template pixel coordinates `x` and `y` of every canvas pixel,
    each of shape `(..., height * width)`, for transforms `(..., 6)`.

    Each is a matmul of one row per transform, `(x_row, y_row) . (p_x,
    p_y, 1)`, with the canvas pixels' normalised coordinates: one dot,
    whose gradient with respect to the rows is one dot too.
    """
    a, b, tx, c, d, ty = (transforms[..., i : i + 1] for i in range(6))
    determinant = a * d - b * c
    a_inv, b_inv = d / determinant, -b / determinant
    c_inv, d_inv = -c / determinant, a / determinant
    tx_inv = a_inv * tx + b_inv * ty
    ty_inv = c_inv * tx + d_inv * ty
    half_h, half_w = (source_size[0] - 1) / 2, (source_size[1] - 1) / 2
    x_row = ops.concatenate(
        [half_w * a_inv, half_w * b_inv, half_w - half_w * tx_inv], axis=-1
    )
    y_row = ops.concatenate(
        [half_h * c_inv, half_h * d_inv, half_h - half_h * ty_inv], axis=-1
    )
    height, width = output_size
    ys, xs = np.meshgrid(
        np.linspace(-1.0, 1.0, height),
        np.linspace(-1.0, 1.0, width),
        indexing="ij",
    )
    pixels = np.stack([xs.reshape(-1), ys.reshape(-1), np.ones(xs.size)])
    pixels = ops.convert_to_tensor(pixels, dtype=transforms.dtype)
    x = matmul(x_row[..., None, :], pixels)[..., 0, :]
    y = matmul(y_row[..., None, :], pixels)[..., 0, :]
    return x, y


def bilinear_sample(images, coordinates):
    """Samples images at real-valued pixel coordinates, bilinearly.

    Pixel `(row, col)` sits at `(x, y) = (col, row)`. A point takes the
    bilinear mix of its four neighbouring pixels, and pixels outside the
    image count as zeros: points within one pixel of the border fade to
    zero, and points farther out are zero. These are the semantics of
    TensorFlow 1's `tf.contrib.resampler.resampler`, which the official
    Stacked Capsule Autoencoders code uses. The result is differentiable
    with respect to the images and to the coordinates, on every backend.

    Args:
        images: Tensor of shape `(batch, height, width, channels)`.
        coordinates: Tensor of shape `(batch, ..., 2)`, the `(x, y)`
            coordinates of the points to sample, column first.

    Returns:
        A tensor of shape `(batch, ..., channels)`.

    Raises:
        ValueError: If `images` does not have rank 4, or `coordinates`
            does not end in 2 or has another batch size.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> images = np.arange(4.0, dtype="float32").reshape(1, 2, 2, 1)
    >>> points = np.array([[[0.5, 0.5], [-2.0, 0.0]]], "float32")
    >>> np.asarray(keras_capsules.ops.bilinear_sample(images, points))[..., 0]
    array([[1.5, 0. ]], dtype=float32)
    """
    images = ops.convert_to_tensor(images)
    coordinates = ops.convert_to_tensor(coordinates)
    if len(images.shape) != 4:
        raise ValueError(
            "Argument images must have shape (batch, height, width, "
            f"channels). Received: images.shape={tuple(images.shape)}"
        )
    if len(coordinates.shape) < 2 or coordinates.shape[-1] != 2:
        raise ValueError(
            "Argument coordinates must have shape (batch, ..., 2). "
            f"Received: coordinates.shape={tuple(coordinates.shape)}"
        )
    if (
        images.shape[0] is not None
        and coordinates.shape[0] is not None
        and images.shape[0] != coordinates.shape[0]
    ):
        raise ValueError(
            "Arguments images and coordinates must have the same batch "
            f"size. Received: images.shape={tuple(images.shape)}, "
            f"coordinates.shape={tuple(coordinates.shape)}"
        )
    dtype, compute_dtype = compute_dtypes(images)
    images = ops.cast(images, compute_dtype)
    coordinates = ops.cast(coordinates, compute_dtype)
    batch = ops.shape(images)[0]
    channels = images.shape[-1]
    point_shape = tuple(ops.shape(coordinates)[1:-1])
    points = ops.reshape(coordinates, (batch, -1, 2))
    sampled = _sample(images, points[..., 0], points[..., 1])
    sampled = ops.reshape(sampled, (batch,) + point_shape + (channels,))
    return ops.cast(sampled, dtype)


# The (row, column) offsets of a cell's four pixels from its top-left
# one, in the order of the cell table's columns.
_CORNERS = ((0, 0), (0, 1), (1, 0), (1, 1))


def _sample(images, x, y):
    """Bilinear samples of `images` `(n, h, w, channels)` at the points
    `(x, y)`, two tensors of shape `(n, points)`: row `i` reads image
    `i`; zeros outside the images. Returns `(n, points, channels)`.

    Each image is padded with one pixel of zeros and turned into a table
    of its cells: row `(r, c)` holds the 2x2 pixels whose top-left corner
    is padded pixel `(r, c)`, so that one gather reads the four
    neighbours of a point. Points whose cell lies beyond the padding are
    more than a pixel outside and sample zero. The gradient with respect
    to the coordinates is written by hand, from the four neighbours read
    again rather than kept; with respect to the images it is a
    scatter-add of the cells' weighted upstream gradients, folded back
    onto the pixels.

    Where `_backend.gathers_per_example` says so (JAX), every image has
    its own table (`take_along_axis`), and the scatter is the gather's own
    gradient: under data parallelism each device then reads and writes
    only its share of the batch. Elsewhere one table holds the whole
    batch, and the scatter is written out: both are faster there.
    """
    if keeps_sampling_intermediates():
        return _sample_keeping(images, x, y)
    _, height, width, channels = images.shape
    num_cells = (height + 1) * (width + 1)

    def cells(x, y):
        # Padded coordinates: pixel (0, 0) of the image is (1, 1).
        x = x + 1.0
        y = y + 1.0
        col = ops.floor(x)
        row = ops.floor(y)
        wx, wy = x - col, y - row
        col = ops.cast(col, "int32")
        row = ops.cast(row, "int32")
        inside = (col >= 0) & (col <= width) & (row >= 0) & (row <= height)
        index = ops.clip(row, 0, height) * (width + 1) + ops.clip(col, 0, width)
        return index, inside, wx, wy

    def corner_weights(inside, wx, wy):
        return [
            ops.where(
                inside, (wx if dc else 1.0 - wx) * (wy if dr else 1.0 - wy), 0.0
            )
            for dr, dc in _CORNERS
        ]

    def corner(values, i):
        return values[..., i * channels : (i + 1) * channels]

    def mix(values, inside, wx, wy):
        sampled = 0.0
        for i, weight in enumerate(corner_weights(inside, wx, wy)):
            sampled = sampled + corner(values, i) * weight[..., None]
        return sampled

    def coordinate_grads(values, upstream, inside, wx, wy):
        # The upstream gradient dotted with each neighbour, channel by
        # channel (no reduction for XLA to materialise).
        dots = []
        for i in range(4):
            dot = corner(values, i)[..., 0] * upstream[..., 0]
            for c in range(1, channels):
                dot = dot + corner(values, i)[..., c] * upstream[..., c]
            dots.append(ops.where(inside, dot, 0.0))
        top_left, top_right, bottom_left, bottom_right = dots
        grad_x = (1.0 - wy) * (top_right - top_left) + wy * (
            bottom_right - bottom_left
        )
        grad_y = (1.0 - wx) * (bottom_left - top_left) + wx * (
            bottom_right - top_right
        )
        return grad_x, grad_y

    def corner_updates(upstream, inside, wx, wy):
        return ops.concatenate(
            [
                weight[..., None] * upstream
                for weight in corner_weights(inside, wx, wy)
            ],
            axis=-1,
        )

    def upstream_of(args, upstream):
        return args[0] if upstream is None else upstream

    if gathers_per_example():

        def gather(table, index):
            return ops.take_along_axis(table, index[..., None], axis=1)

        @ops.custom_gradient
        def mix_neighbours(values, table, x, y):
            _, inside, wx, wy = cells(x, y)

            def grad(*args, upstream=None):
                upstream = upstream_of(args, upstream)
                index, inside, wx, wy = cells(x, y)
                values = gather(table, index)
                grad_x, grad_y = coordinate_grads(
                    values, upstream, inside, wx, wy
                )
                grad_values = corner_updates(upstream, inside, wx, wy)
                return grad_values, ops.zeros_like(table), grad_x, grad_y

            return mix(values, inside, wx, wy), grad

        table = _cell_table(images)
        index, _, _, _ = cells(ops.stop_gradient(x), ops.stop_gradient(y))
        values = gather(table, index)
        return mix_neighbours(values, ops.stop_gradient(table), x, y)

    def rows_of(index):
        # Rows of the batch's table, `(n * points, 1)`.
        num_images = ops.shape(index)[0]
        offsets = ops.arange(num_images, dtype="int32")[:, None] * num_cells
        return ops.reshape(index + offsets, (-1, 1))

    def gather_rows(images, index):
        table = ops.reshape(_cell_table(images), (-1, 4 * channels))
        values = ops.take(table, rows_of(index)[:, 0], axis=0)
        return ops.reshape(values, tuple(ops.shape(index)) + (4 * channels,))

    @ops.custom_gradient
    def sample(images, x, y):
        index, inside, wx, wy = cells(x, y)
        sampled = mix(gather_rows(images, index), inside, wx, wy)

        def grad(*args, upstream=None):
            upstream = upstream_of(args, upstream)
            index, inside, wx, wy = cells(x, y)
            values = gather_rows(images, index)
            grad_x, grad_y = coordinate_grads(values, upstream, inside, wx, wy)
            updates = corner_updates(upstream, inside, wx, wy)
            num_images = ops.shape(images)[0]
            table = ops.scatter_update(
                ops.zeros((num_images * num_cells, 4 * channels), x.dtype),
                rows_of(index),
                ops.reshape(updates, (-1, 4 * channels)),
                reduction="add",
            )
            return _pixels_of_cells(table, images.shape), grad_x, grad_y

        return sampled, grad

    return sample(images, x, y)


def _cell_table(images):
    """The table of cells of `images` `(n, h, w, channels)`, padded with
    one pixel of zeros: `(n, (h + 1) * (w + 1), 4 * channels)`, row
    `(r, c)` holding the 2x2 padded pixels whose top-left corner is
    `(r, c)`, corner by corner in the order of `_CORNERS`."""
    _, height, width, channels = images.shape
    padded = ops.pad(images, ((0, 0), (1, 1), (1, 1), (0, 0)))
    table = ops.concatenate(
        [
            padded[:, dr : dr + height + 1, dc : dc + width + 1]
            for dr, dc in _CORNERS
        ],
        axis=-1,
    )
    return ops.reshape(table, (-1, (height + 1) * (width + 1), 4 * channels))


def _pixels_of_cells(table, image_shape):
    """The adjoint of `_cell_table`: a table of the batch's cells,
    `(n * cells, 4 * channels)`, summed back onto the pixels of images of
    shape `image_shape` (each corner onto its pixel; the padding dropped).
    """
    _, height, width, channels = image_shape
    table = ops.reshape(table, (-1, height + 1, width + 1, 4 * channels))
    padded = sum(
        ops.pad(
            table[..., i * channels : (i + 1) * channels],
            ((0, 0), (dr, 1 - dr), (dc, 1 - dc), (0, 0)),
        )
        for i, (dr, dc) in enumerate(_CORNERS)
    )
    return padded[:, 1:-1, 1:-1]


def _sample_keeping(images, x, y):
    """`_sample` for a backend that runs it eagerly (PyTorch), where every
    operation is another pass over the batch's points: the same samples
    and gradients in about half the passes.

    A point is first clamped into the padded image: one more than a pixel
    outside (or NaN) lands on the zero border, where it reads zero (its
    weight on the image's pixels is exactly zero), so no mask is needed
    forward.
    The corners are mixed row by row (`top + wx (right - left)`), the
    forward pass keeps what the gradient reads (the weights, the
    differences of the neighbours, the cells' rows), and the coordinates'
    gradient is masked to zero outside, as the resampler's is.
    """
    _, height, width, channels = images.shape
    num_cells = (height + 1) * (width + 1)

    @ops.custom_gradient
    def sample(images, x, y):
        # Padded coordinates: pixel (0, 0) of the image is (1, 1).
        x = x + 1.0
        y = y + 1.0
        # Clamped by comparisons, which take a NaN to the border too.
        x_in = ops.where(x > 0.0, x, 0.0)
        x_in = ops.where(x_in < width + 1.0, x_in, width + 1.0)
        y_in = ops.where(y > 0.0, y, 0.0)
        y_in = ops.where(y_in < height + 1.0, y_in, height + 1.0)
        col = ops.minimum(ops.floor(x_in), float(width))
        row = ops.minimum(ops.floor(y_in), float(height))
        wx = (x_in - col)[..., None]
        wy = (y_in - row)[..., None]
        num_images = ops.shape(images)[0]
        offsets = ops.arange(num_images, dtype="int64")[:, None] * num_cells
        rows = ops.cast(row, "int64") * (width + 1) + ops.cast(col, "int64")
        rows = ops.reshape(rows + offsets, (-1,))
        table = ops.reshape(_cell_table(images), (-1, 4 * channels))
        values = ops.take(table, rows, axis=0)
        values = ops.reshape(values, tuple(ops.shape(x)) + (4, channels))
        top_left, top_right, bottom_left, bottom_right = (
            values[..., i, :] for i in range(4)
        )
        top_dx = top_right - top_left
        bottom_dx = bottom_right - bottom_left
        top = top_left + wx * top_dx
        dy = bottom_left + wx * bottom_dx - top
        sampled = top + wy * dy

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            inside = (x >= 0.0) & (x < width + 1.0)
            inside = inside & (y >= 0.0) & (y < height + 1.0)
            bottom = upstream * wy
            top = upstream - bottom
            grad_x = ops.sum(top * top_dx + bottom * bottom_dx, axis=-1)
            grad_y = ops.sum(upstream * dy, axis=-1)
            top_right = top * wx
            bottom_right = bottom * wx
            corners = [top - top_right, top_right]
            corners += [bottom - bottom_right, bottom_right]
            updates = ops.stack(corners, axis=-2)
            table = ops.scatter_update(
                ops.zeros((num_images * num_cells, 4 * channels), x.dtype),
                rows[:, None],
                ops.reshape(updates, (-1, 4 * channels)),
                reduction="add",
            )
            return (
                _pixels_of_cells(table, images.shape),
                ops.where(inside, grad_x, 0.0),
                ops.where(inside, grad_y, 0.0),
            )

        return sampled, grad

    return sample(images, x, y)


def warp_templates(templates, transforms, output_size):
    """Places templates on a canvas, each by its own affine transform.

    Every output pixel samples its template bilinearly (zeros outside it)
    at the point the inverse of the transform takes it to; see
    `keras_capsules.ops.affine_sampling_grid` for the coordinates and
    `keras_capsules.ops.bilinear_sample` for the sampling. This is the
    warping of the template decoder of Stacked Capsule Autoencoders, and it
    is differentiable with respect to both the templates and the
    transforms (unlike `keras.ops.image.affine_transform` on TensorFlow,
    which has no gradient with respect to the transform).

    Args:
        templates: Tensor of shape `(batch, num_templates, h, w, channels)`;
            a batch size of 1 is shared by every example.
        transforms: Tensor of shape `(batch, num_templates, 6)`, the
            affine transforms `(a, b, tx, c, d, ty)` from template to
            canvas coordinates, as `keras_capsules.ops.geometric_transform`
            returns them.
        output_size: Tuple `(height, width)` of the canvas.

    Returns:
        A tensor of shape `(batch, num_templates, height, width, channels)`.

    Raises:
        ValueError: If the shapes do not fit together or `output_size` is
            not a pair of positive integers.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> templates = np.ones((1, 3, 11, 11, 1), "float32")
    >>> poses = keras_capsules.ops.geometric_transform(
    ...     np.zeros((2, 3, 6), "float32")
    ... )
    >>> canvas = keras_capsules.ops.warp_templates(templates, poses, (40, 40))
    >>> tuple(canvas.shape)
    (2, 3, 40, 40, 1)
    """
    output_size = check_int_tuple(output_size, "output_size", length=2)
    templates = ops.convert_to_tensor(templates)
    transforms = ops.convert_to_tensor(transforms)
    if len(templates.shape) != 5:
        raise ValueError(
            "Argument templates must have shape (batch, num_templates, "
            "height, width, channels). "
            f"Received: templates.shape={tuple(templates.shape)}"
        )
    check_pose_params(transforms.shape, "transforms")
    if len(transforms.shape) != 3 or (
        templates.shape[1] is not None
        and transforms.shape[1] is not None
        and templates.shape[1] != transforms.shape[1]
    ):
        raise ValueError(
            "Argument transforms must have shape (batch, num_templates, 6) "
            f"with the num_templates of templates, {templates.shape[1]}. "
            f"Received: transforms.shape={tuple(transforms.shape)}"
        )
    batch, num_templates = ops.shape(transforms)[:2]
    source_size = tuple(templates.shape[2:4])
    channels = templates.shape[-1]
    dtype, compute_dtype = compute_dtypes(templates)
    templates = ops.broadcast_to(
        ops.cast(templates, compute_dtype),
        (batch, num_templates) + tuple(ops.shape(templates)[2:]),
    )
    images = ops.reshape(templates, (-1,) + source_size + (channels,))
    x, y = _source_points(
        ops.cast(transforms, compute_dtype), output_size, source_size
    )
    points = output_size[0] * output_size[1]
    warped = _sample(
        images, ops.reshape(x, (-1, points)), ops.reshape(y, (-1, points))
    )
    warped = ops.reshape(
        warped, (batch, num_templates) + output_size + (channels,)
    )
    return ops.cast(warped, dtype)
