"""Affine warping of templates onto a canvas, differentiable with respect
to the transforms on every backend (Stacked Capsule Autoencoders)."""

import numpy as np
from keras import ops

from keras_capsules._validation import check_int_tuple
from keras_capsules._validation import check_pose_params
from keras_capsules.ops._bilinear import sample_points
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
    sampled = sample_points(images, points[..., 0], points[..., 1])
    sampled = ops.reshape(sampled, (batch,) + point_shape + (channels,))
    return ops.cast(sampled, dtype)


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
    warped = sample_points(
        images, ops.reshape(x, (-1, points)), ops.reshape(y, (-1, points))
    )
    warped = ops.reshape(
        warped, (batch, num_templates) + output_size + (channels,)
    )
    return ops.cast(warped, dtype)
