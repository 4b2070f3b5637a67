"""Bilinear sampling of images at real-valued points, with hand-written
gradients: the formulations of `ops.bilinear_sample` and
`ops.warp_templates` (`_backend` chooses one per backend)."""

from keras import ops

from keras_capsules.ops._backend import gathers_per_example
from keras_capsules.ops._backend import keeps_sampling_intermediates

# The (row, column) offsets of a cell's four pixels from its top-left
# one, in the order of the cell table's columns.
_CORNERS = ((0, 0), (0, 1), (1, 0), (1, 1))


def sample_points(images, x, y):
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
    batch, and the scatter is written out: both are faster there. Where
    `_backend.keeps_sampling_intermediates` says so (PyTorch, eager),
    `_sample_keeping` keeps what the gradient reads instead.
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

    if gathers_per_example():

        def gather(table, index):
            return ops.take_along_axis(table, index[..., None], axis=1)

        @ops.custom_gradient
        def mix_neighbours(values, table, x, y):
            _, inside, wx, wy = cells(x, y)

            def grad(*args, upstream=None):
                upstream = _upstream(args, upstream)
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
            upstream = _upstream(args, upstream)
            index, inside, wx, wy = cells(x, y)
            values = gather_rows(images, index)
            grad_x, grad_y = coordinate_grads(values, upstream, inside, wx, wy)
            updates = corner_updates(upstream, inside, wx, wy)
            grad_images = _pixels_of_cells(updates, rows_of(index), images)
            return grad_images, grad_x, grad_y

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


def _upstream(args, upstream):
    """The upstream gradient a custom gradient receives: positionally on
    some backends, as `upstream=` on others."""
    return args[0] if upstream is None else upstream


def _pixels_of_cells(updates, rows, images):
    """The adjoint of gathering rows `rows` `(m, 1)` of the batch's table of
    cells of `images`: `updates` (`m` rows of `4 * channels` values, in
    any shape) scatter-added into the table, then each corner summed back
    onto its pixel (the padding dropped)."""
    _, height, width, channels = images.shape
    num_cells = (height + 1) * (width + 1)
    table = ops.scatter_update(
        ops.zeros(
            (ops.shape(images)[0] * num_cells, 4 * channels), updates.dtype
        ),
        rows,
        ops.reshape(updates, (-1, 4 * channels)),
        reduction="add",
    )
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
    """`sample_points` for a backend that runs it eagerly (PyTorch),
    where every operation is another pass over the batch's points: the
    same samples and gradients in about half the passes.

    A point is first clamped into the padded image: one more than a pixel
    outside (or NaN) lands on the zero border, where it reads zero (its
    weight on the image's pixels is exactly zero), so no mask is needed
    forward. The corners are mixed row by row (`top + wx (right -
    left)`), the forward pass keeps what the gradient reads (the weights,
    the differences of the neighbours, the cells' rows), and the
    coordinates' gradient is masked to zero outside, as the resampler's
    is.
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
            upstream = _upstream(args, upstream)
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
            return (
                _pixels_of_cells(updates, rows[:, None], images),
                ops.where(inside, grad_x, 0.0),
                ops.where(inside, grad_y, 0.0),
            )

        return sampled, grad

    return sample(images, x, y)
