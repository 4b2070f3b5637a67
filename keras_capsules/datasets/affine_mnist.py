"""Translated, affine-transformed and rotated MNIST, made on the fly.

These are the inputs of the generalisation experiments of capsule networks:
`translate` builds the 40x40 training set of the affNIST experiment of Sabour
et al. (2017), `transform` draws affNIST-style random affine transformations
(Tieleman's affNIST), and `rotate` turns images by given angles, for
"novel viewpoint" experiments such as training on small rotations and testing
on large ones.

Everything here is NumPy: it runs on any backend and without TensorFlow.
Images are `(N, height, width)` or `(N, height, width, 1)` arrays, `uint8`
with values in `[0, 255]` or float with values in `[0, 1]`, such as those of
`keras_capsules.datasets.mnist.load_sample`; every function returns the same
layout and dtype.

All three functions share one geometry, stated as seen on screen: in
coordinates centred on an image of size `height x width`, with `x` to the
right and `y` up, pixel `(row, col)` sits at `x = col - (width - 1) / 2`,
`y = (height - 1) / 2 - row`, and a positive angle turns counter-clockwise,
as `np.rot90` does. Results are sampled by inverse mapping with bilinear
interpolation: every output pixel takes the bilinear interpolation of the
four input pixels around the point it comes from, with zeros outside the
input.
"""

import math

import numpy as np

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_image_values
from keras_capsules._validation import check_int
from keras_capsules._validation import check_non_negative_number
from keras_capsules._validation import check_positive_int

# Output pixels sampled per chunk: about 2**20 keeps every temporary array of
# the bilinear sampling near 8 MB, whatever the batch and canvas sizes.
_PIXELS_PER_CHUNK = 2**20


def translate(images, seed=0, canvas_size=40):
    """Places each image at a random position on a larger black canvas.

    Every image is copied, unchanged, at a uniformly random integer offset
    inside a `canvas_size x canvas_size` canvas of zeros: for 28x28 MNIST
    digits on the default 40x40 canvas, offsets `0..12` along each axis, that
    is shifts of up to 6 pixels either way from the centre. Nothing is
    interpolated and no pixel is lost.

    This is the training set of the affNIST experiment of Sabour et al.
    (2017), section 5.2: a CapsNet "trained on MNIST digits placed randomly
    on a black background of 40x40 pixels" and tested on affNIST. The
    official generator (`mnist_shift.py` of the paper's code) builds that set
    with `--shift=6 --pad=6`, the same positions: pad by 6 to 40x40, then
    shift by up to 6 pixels. The generator writes all 169 shifted copies of
    every image, where this function draws one position per image and call;
    call it with a new seed every epoch for more positions.

    Sabour et al., 2017, [Dynamic Routing Between Capsules](
    https://arxiv.org/abs/1710.09829).

    Args:
        images: Images of shape `(N, height, width)` or
            `(N, height, width, 1)`, `uint8` or float.
        seed: Int `>= 0` seeding `np.random.default_rng`, or `None` for
            fresh, unrepeatable randomness. An image's result depends only
            on the seed, the image and its index in the batch. Defaults to
            `0`.
        canvas_size: Positive int, side of the square output, at least the
            image's height and width. Defaults to `40`.

    Returns:
        An array of shape `(N, canvas_size, canvas_size)` or
        `(N, canvas_size, canvas_size, 1)`, as the input, with its dtype.

    Raises:
        TypeError: If `images` has a dtype other than `uint8` or float.
        ValueError: If `images` has the wrong shape or holds NaN or an
            infinity, `seed` is not an int `>= 0` or `None`, or
            `canvas_size` is not a positive int or is smaller than the
            images.

    Example:

    >>> import numpy as np
    >>> from keras_capsules.datasets import affine_mnist
    >>> x = np.ones((2, 28, 28, 1), "float32")
    >>> y = affine_mnist.translate(x, seed=0)
    >>> y.shape, float(y.sum() / x.sum())
    ((2, 40, 40, 1), 1.0)
    """
    fn = "affine_mnist.translate"
    images, has_channel = _check_images(images, fn)
    check_int(seed, "seed", allow_none=True, owner=fn)
    canvas_size = check_positive_int(canvas_size, "canvas_size", owner=fn)
    num_images, height, width = images.shape
    if canvas_size < max(height, width):
        raise ValueError(
            f"`{fn}`: argument `canvas_size` must be at least the images' "
            f"height and width ({height}x{width}), so that every image fits "
            f"whole. Received: canvas_size={canvas_size}"
        )
    rng = np.random.default_rng(seed)
    offsets = rng.integers(
        0,
        (canvas_size - height + 1, canvas_size - width + 1),
        size=(num_images, 2),
    )
    output = np.zeros((num_images, canvas_size * canvas_size), images.dtype)
    # One flat index per input pixel, its destination on the canvas.
    grid = (
        np.arange(height)[:, None] * canvas_size + np.arange(width)[None, :]
    ).ravel()
    chunk = max(1, _PIXELS_PER_CHUNK // (height * width))
    for start in range(0, num_images, chunk):
        stop = min(start + chunk, num_images)
        corner = offsets[start:stop, 0] * canvas_size + offsets[start:stop, 1]
        np.put_along_axis(
            output[start:stop],
            corner[:, None] + grid[None, :],
            images[start:stop].reshape(stop - start, -1),
            axis=1,
        )
    return _restore(
        output.reshape(num_images, canvas_size, canvas_size), has_channel
    )


def transform(
    images,
    seed=0,
    canvas_size=40,
    max_rotation=20.0,
    max_shear=0.2,
    scale_range=(0.8, 1.2),
    return_parameters=False,
):
    """Applies an affNIST-style random affine transformation to each image.

    Each image gets its own transformation, drawn uniformly and independently:
    a rotation in `[-max_rotation, max_rotation]` degrees, a horizontal shear
    in `[-max_shear, max_shear]`, and horizontal and vertical scale factors,
    each in `scale_range`; the defaults are the ranges of affNIST. The result
    is placed on a `canvas_size x canvas_size` black canvas at a random
    translation, uniform among those that keep the ink (the bounding box of
    the non-zero pixels) off the canvas' outermost rows and columns.

    With `x` to the right and `y` up, a point `p` of the input, measured from
    the input's centre, lands at

        A p + (shift_x, -shift_y),
        A = R(rotation) H(shear) S(scale_x, scale_y),

    measured from the canvas' centre. `S` scales `x` by `scale_x` and `y` by
    `scale_y`, `H` maps `(x, y)` to `(x + shear * y, y)` (a positive shear
    slants the digit to the right) and `R` rotates counter-clockwise by
    `rotation` degrees; `shift_x` moves the digit right and `shift_y` down, in
    pixels. Output pixels are sampled bilinearly.

    The published affNIST files are a fixed set (32 transformed copies of each
    of the 70,000 MNIST digits) made with the author's own interpolation and
    translation rules; this draws new transformations on the fly, so accuracy
    on its images is not directly comparable to published affNIST accuracy. A
    digit too large for the canvas is centred and cut at the edges.

    Args:
        images: Images of shape `(N, height, width)` or `(N, height, width,
            1)`, `uint8` or float; 28x28 MNIST digits for affNIST.
        seed: Int `>= 0` seeding `np.random.default_rng`, or `None` for fresh,
            unrepeatable randomness. An image's result depends only on the
            seed, the image and its index in the batch. Defaults to `0`.
        canvas_size: Positive int, side of the square output. Defaults to
            `40`, the affNIST size.
        max_rotation: Non-negative number, the largest rotation in degrees,
            either way. Defaults to `20.0`.
        max_shear: Non-negative number, the largest shear factor, either way.
            Defaults to `0.2`.
        scale_range: Pair `(low, high)` of positive numbers, `low <= high`, the
            range of each of the two scale factors. Defaults to `(0.8, 1.2)`.
        return_parameters: Whether to return the drawn parameters too.
            Defaults to `False`.

    Returns:
        An array of shape `(N, canvas_size, canvas_size)` or `(N, canvas_size,
        canvas_size, 1)`, as the input, with its dtype (`uint8` results
        rounded). With `return_parameters=True`, a tuple `(images,
        parameters)`, where `parameters` maps `"rotation"` (degrees),
        `"shear"`, `"scale_x"`, `"scale_y"`, `"shift_x"` and `"shift_y"`
        (pixels) to float64 arrays of shape `(N,)`.

    Raises:
        TypeError: If `images` has a dtype other than `uint8` or float, or
            another argument has the wrong type.
        ValueError: If `images` has the wrong shape or holds NaN or an
            infinity, or another argument has an invalid value.

    Example:

    >>> import numpy as np
    >>> from keras_capsules.datasets import affine_mnist
    >>> x = np.zeros((3, 28, 28), "uint8")
    >>> x[:, 4:24, 10:18] = 255
    >>> y, parameters = affine_mnist.transform(
    ...     x, seed=0, return_parameters=True
    ... )
    >>> y.shape, y.dtype.name
    ((3, 40, 40), 'uint8')
    >>> sorted(parameters)
    ['rotation', 'scale_x', 'scale_y', 'shear', 'shift_x', 'shift_y']

    Reference:
        Tieleman, [affNIST](https://www.cs.toronto.edu/~tijmen/affNIST/).
    """
    fn = "affine_mnist.transform"
    images, has_channel = _check_images(images, fn)
    check_int(seed, "seed", allow_none=True, owner=fn)
    canvas_size = check_positive_int(canvas_size, "canvas_size", owner=fn)
    max_rotation = float(
        check_non_negative_number(max_rotation, "max_rotation", owner=fn)
    )
    max_shear = float(
        check_non_negative_number(max_shear, "max_shear", owner=fn)
    )
    low, high = _check_scale_range(scale_range, fn)
    check_bool(return_parameters, "return_parameters", owner=fn)
    num_images, height, width = images.shape

    # One row of six uniform draws per image, in image order: an image's
    # transformation depends on the seed and its index only, not on how
    # many images follow it.
    draws = np.random.default_rng(seed).random((num_images, 6))
    rotation = max_rotation * (2 * draws[:, 0] - 1)
    shear = max_shear * (2 * draws[:, 1] - 1)
    scale_x = low + (high - low) * draws[:, 2]
    scale_y = low + (high - low) * draws[:, 3]
    position = draws[:, 4:]

    linear = (
        _rotation_matrices(rotation)
        @ _shear_matrices(shear)
        @ _scale_matrices(scale_x, scale_y)
    )
    low_shift, high_shift = _shift_ranges(images, linear, canvas_size)
    # Uniform over each image's own range of translations.
    shift = low_shift + position * (high_shift - low_shift)
    centre = (canvas_size - 1) / 2
    # Where the input's centre lands, as (x, y) of the output grid.
    centres = np.stack([centre + shift[:, 0], centre + shift[:, 1]], axis=-1)
    output = _resample(
        images, np.linalg.inv(linear), centres, (canvas_size, canvas_size)
    )
    output = _restore(output, has_channel)
    if not return_parameters:
        return output
    parameters = {
        "rotation": rotation,
        "shear": shear,
        "scale_x": scale_x,
        "scale_y": scale_y,
        "shift_x": shift[:, 0],
        "shift_y": shift[:, 1],
    }
    return output, parameters


def rotate(images, angles):
    """Rotates each image about its centre, keeping its size.

    Positive angles turn the image counter-clockwise, as seen on screen (the
    convention of `np.rot90`, which `rotate(images, 90)` matches on square
    images). Output pixels are sampled bilinearly; what turns out of the
    frame is cut and the uncovered corners are zero, so give the digit room
    first (for example with `translate` or `np.pad`) when nothing may be
    lost.

    It serves an MNIST analogue of the novel-viewpoint experiment that
    Hinton et al. (2018) ran on smallNORB: train on angles drawn from
    `[-30, 30]` degrees and test on larger ones, such as `30..90` degrees
    either way.

    Args:
        images: Images of shape `(N, height, width)` or
            `(N, height, width, 1)`, `uint8` or float.
        angles: Angle in degrees, a number for all images or an array of
            shape `(N,)`, one per image.

    Returns:
        An array with the shape and dtype of `images` (`uint8` results
        rounded).

    Raises:
        TypeError: If `images` has a dtype other than `uint8` or float, or
            `angles` is not numeric.
        ValueError: If `images` has the wrong shape or holds NaN or an
            infinity, or `angles` has the wrong shape or a non-finite value.

    Example:

    >>> import numpy as np
    >>> from keras_capsules.datasets import affine_mnist
    >>> x = np.arange(9, dtype="float32").reshape(1, 3, 3)
    >>> np.allclose(affine_mnist.rotate(x, 90), np.rot90(x, axes=(1, 2)))
    True
    """
    fn = "affine_mnist.rotate"
    images, has_channel = _check_images(images, fn)
    num_images, height, width = images.shape
    angles = _check_angles(angles, num_images, fn)
    # The inverse of a rotation is the rotation by the opposite angle.
    inverse = _rotation_matrices(-angles)
    centres = np.tile([(width - 1) / 2, (height - 1) / 2], (num_images, 1))
    output = _resample(images, inverse, centres, (height, width))
    return _restore(output, has_channel)


def _check_images(images, fn):
    """Returns `(images as (N, height, width), whether a channel was
    dropped)`."""
    images = np.asarray(images)
    if images.dtype != np.uint8 and not np.issubdtype(
        images.dtype, np.floating
    ):
        raise TypeError(
            f"`{fn}`: argument `images` must have dtype uint8 (values "
            "0..255) or a float dtype (values 0..1). "
            f"Received: images.dtype={images.dtype}"
        )
    valid_rank = images.ndim == 3 or (
        images.ndim == 4 and images.shape[-1] == 1
    )
    if not valid_rank or 0 in images.shape[1:3]:
        raise ValueError(
            f"`{fn}`: argument `images` must have shape (N, height, width) "
            "or (N, height, width, 1), with a single channel. "
            f"Received: images.shape={images.shape}"
        )
    # Bilinear sampling spreads a NaN to its neighbours, and the ink box
    # that bounds `transform`'s translations counts NaN as ink. The range
    # is not checked: the geometry is the same on any scale.
    check_image_values(images, "images", owner=fn)
    has_channel = images.ndim == 4
    if has_channel:
        images = images[..., 0]
    return images, has_channel


def _restore(images, has_channel):
    return images[..., None] if has_channel else images


def _check_scale_range(scale_range, fn):
    """Returns `(low, high)` as floats, `0 < low <= high`, both finite."""
    valid = (
        isinstance(scale_range, (tuple, list))
        and len(scale_range) == 2
        and all(
            not isinstance(v, bool)
            and isinstance(v, (int, float, np.integer, np.floating))
            and math.isfinite(v)
            and v > 0
            for v in scale_range
        )
        and scale_range[0] <= scale_range[1]
    )
    if not valid:
        raise ValueError(
            f"`{fn}`: argument `scale_range` must be a pair (low, high) of "
            "finite positive numbers with low <= high, such as (0.8, 1.2). "
            f"Received: scale_range={scale_range!r}"
        )
    return float(scale_range[0]), float(scale_range[1])


def _check_angles(angles, num_images, fn):
    """Returns one float64 angle per image."""
    array = np.asarray(angles)
    if array.dtype == bool or array.dtype.kind not in "iuf":
        raise TypeError(
            f"`{fn}`: argument `angles` must be a number or an array of "
            f"numbers, in degrees. Received: angles={angles!r}"
        )
    if array.ndim > 1 or (array.ndim == 1 and array.shape[0] != num_images):
        raise ValueError(
            f"`{fn}`: argument `angles` must be a number or an array of "
            f"shape ({num_images},), one angle per image. "
            f"Received: angles.shape={array.shape}"
        )
    array = np.broadcast_to(array.astype("float64"), (num_images,))
    if not np.all(np.isfinite(array)):
        raise ValueError(
            f"`{fn}`: argument `angles` must be finite. "
            f"Received: angles={angles!r}"
        )
    return array


def _rotation_matrices(degrees):
    """Counter-clockwise rotations of `(x, y)` with `y` up, `(N, 2, 2)`."""
    radians = np.deg2rad(degrees)
    cos, sin = np.cos(radians), np.sin(radians)
    return np.stack(
        [np.stack([cos, -sin], -1), np.stack([sin, cos], -1)], axis=-2
    )


def _shear_matrices(shear):
    ones, zeros = np.ones_like(shear), np.zeros_like(shear)
    return np.stack(
        [np.stack([ones, shear], -1), np.stack([zeros, ones], -1)], axis=-2
    )


def _scale_matrices(scale_x, scale_y):
    zeros = np.zeros_like(scale_x)
    return np.stack(
        [np.stack([scale_x, zeros], -1), np.stack([zeros, scale_y], -1)],
        axis=-2,
    )


def _shift_ranges(images, linear, canvas_size):
    """Per image, the `(shift_x, shift_y)` ranges that keep its ink inside.

    Bilinear sampling gives ink only to output points that come from within
    one pixel of an input ink pixel, so the ink's bounding box, grown by one
    pixel, bounds the transformed digit. Keeping the corners of that box
    within the canvas' outer pixel centres keeps every inked output pixel
    off the outermost rows and columns.
    """
    num_images, height, width = images.shape
    inked = images != 0
    rows, cols = inked.any(axis=2), inked.any(axis=1)
    # A blank image gets its whole frame as bounding box.
    blank = ~rows.any(1)
    top = np.where(blank, 0, rows.argmax(1))
    bottom = np.where(blank, height - 1, height - 1 - rows[:, ::-1].argmax(1))
    left = np.where(blank, 0, cols.argmax(1))
    right = np.where(blank, width - 1, width - 1 - cols[:, ::-1].argmax(1))
    centre_x, centre_y = (width - 1) / 2, (height - 1) / 2
    xs = np.stack([left - 1, right + 1], -1) - centre_x
    ys = centre_y - np.stack([top - 1, bottom + 1], -1)
    corners = np.stack(
        [
            np.stack([xs[:, i], ys[:, j]], -1)
            for i in range(2)
            for j in range(2)
        ],
        axis=1,
    )
    moved = np.einsum("nij,nkj->nki", linear, corners)
    low_x, high_x = moved[..., 0].min(1), moved[..., 0].max(1)
    low_y, high_y = moved[..., 1].min(1), moved[..., 1].max(1)
    half = (canvas_size - 1) / 2
    # Output column is half + shift_x + x and output row is
    # half + shift_y - y; both must stay in [0, canvas_size - 1].
    low = np.stack([-half - low_x, high_y - half], -1)
    high = np.stack([half - high_x, half + low_y], -1)
    middle = (low + high) / 2
    too_big = low > high
    return np.where(too_big, middle, low), np.where(too_big, middle, high)


def _resample(images, inverse, centres, output_shape):
    """Bilinear inverse-mapped sampling of a batch of images.

    `inverse[i]` maps output points to input points, both as `(x, y)` with
    `y` up and measured from the image centres; `centres[i]` is where, as
    output `(col, row)`, the input's centre lands. Works in chunks so that
    memory stays bounded whatever the batch size.
    """
    num_images = images.shape[0]
    out_height, out_width = output_shape
    dtype = np.result_type(images.dtype, np.float32)
    output = np.empty((num_images, out_height, out_width), dtype)
    chunk = max(1, _PIXELS_PER_CHUNK // (out_height * out_width))
    for start in range(0, num_images, chunk):
        stop = min(start + chunk, num_images)
        output[start:stop] = _resample_chunk(
            images[start:stop].astype(dtype),
            inverse[start:stop],
            centres[start:stop],
            output_shape,
        )
    if images.dtype == np.uint8:
        return np.clip(np.rint(output), 0, 255).astype(np.uint8)
    return output.astype(images.dtype, copy=False)


def _resample_chunk(images, inverse, centres, output_shape):
    num_images, height, width = images.shape
    out_height, out_width = output_shape
    out_rows = np.repeat(np.arange(out_height, dtype="float64"), out_width)
    out_cols = np.tile(np.arange(out_width, dtype="float64"), out_height)
    # Output points as (x, y), y up, measured from where the centre landed.
    x = out_cols[None, :] - centres[:, 0:1]
    y = centres[:, 1:2] - out_rows[None, :]
    source_col = (width - 1) / 2 + inverse[:, 0, 0:1] * x
    source_col += inverse[:, 0, 1:2] * y
    source_row = (height - 1) / 2 - inverse[:, 1, 0:1] * x
    source_row -= inverse[:, 1, 1:2] * y
    # Zero padding of 1 before and 2 after each axis lets every clipped
    # point read its four neighbours in bounds, zeros outside the image.
    np.clip(source_row, -1, height, out=source_row)
    np.clip(source_col, -1, width, out=source_col)
    row0, col0 = np.floor(source_row), np.floor(source_col)
    row_weight = (source_row - row0).astype(images.dtype)
    col_weight = (source_col - col0).astype(images.dtype)
    stride = width + 3
    padded = np.pad(images, ((0, 0), (1, 2), (1, 2))).reshape(num_images, -1)
    index = (row0.astype(np.intp) + 1) * stride + col0.astype(np.intp) + 1

    def pick(offset):
        return np.take_along_axis(padded, index + offset, axis=1)

    top_left, top_right = pick(0), pick(1)
    top = top_left + col_weight * (top_right - top_left)
    bottom_left, bottom_right = pick(stride), pick(stride + 1)
    bottom = bottom_left + col_weight * (bottom_right - bottom_left)
    values = top + row_weight * (bottom - top)
    return values.reshape(num_images, out_height, out_width)
