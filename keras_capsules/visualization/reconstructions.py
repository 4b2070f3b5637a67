"""A figure of input images above their reconstructions."""

import numpy as np
from keras import ops

from keras_capsules._validation import check_image_values
from keras_capsules._validation import check_int
from keras_capsules.visualization import _figures

# One colour channel per reconstruction of the same input (red, green,
# blue), so that overlapping strokes mix: red and green give yellow.
_COLORS = {
    "red": (1.0, 0.0, 0.0),
    "green": (0.0, 1.0, 0.0),
    "blue": (0.0, 0.0, 1.0),
}


def reconstructions(
    inputs, outputs, num_images=None, titles=None, output_names=None
):
    """Draws input images above their reconstructions.

    Takes arrays, whatever produced them (for example
    `keras_capsules.models.CapsNet.reconstruct`). The first row shows the
    inputs in gray, the second row the reconstructions, one column per
    input. `outputs` holds either one reconstruction per input, drawn in
    gray, or `K` of them per input (at most 3; MultiMNIST has one per
    digit, `K = 2`), drawn as one colour image per input whose channel `k`
    is reconstruction `k`: red, green, then blue, so that pixels both
    reconstructions cover turn yellow. A legend names the colours.

    Which of the two `outputs` is follows from the shapes: `outputs` has
    one reconstruction per input when its shape is the shape of `inputs`
    (a trailing channel axis of 1 may be added or dropped), and `K` when
    it has shape `(num_inputs, K, height, width)` or
    `(num_inputs, K, height, width, 1)`.

    Args:
        inputs: Array of shape `(num_inputs, height, width)` or
            `(num_inputs, height, width, channels)` with 1 or 3 channels,
            values in `[0, 1]`.
        outputs: Array of the shape of `inputs`, or of shape
            `(num_inputs, K, height, width[, 1])`, values in `[0, 1]`.
        num_images: Positive integer, how many of the first inputs to
            draw, or `None` for all. Defaults to `None`.
        titles: List of `num_images` strings, one column title each (such
            as the labels), or `None` for none. Defaults to `None`.
        output_names: List of `K` strings naming the reconstructions of
            one input in the legend (such as `["digit 1", "digit 2"]`), or
            `None` for `reconstruction 1`, ... Only for `K` reconstructions
            per input. Defaults to `None`.

    Returns:
        A `matplotlib.figure.Figure` with two rows of `num_images` panels,
        "input" and "reconstruction", values drawn on the scale `[0, 1]`.
        Save it with `fig.savefig(path)`.

    Raises:
        ImportError: If matplotlib is not installed.
        ValueError: If the shapes of `inputs` and `outputs` do not match
            one of the forms above, if either holds NaN, an infinity or a
            value outside `[0, 1]` (such as 0..255 pixels), or if another
            argument is invalid.

    Example:

    >>> import numpy as np
    >>> from keras_capsules.visualization import reconstructions
    >>> images = np.random.rand(4, 28, 28, 1)
    >>> # One reconstruction per image, e.g. from CapsNet.reconstruct.
    >>> fig = reconstructions(images, images, titles=["7", "2", "1", "0"])
    >>> len(fig.axes)  # inputs above reconstructions
    8
    >>> # MultiMNIST: one reconstruction per digit, in red and green.
    >>> digits = np.random.rand(4, 2, 28, 28, 1)
    >>> fig = reconstructions(images, digits, output_names=["first", "second"])
    >>> fig.axes[4].images[0].get_array().shape
    (28, 28, 3)
    >>> # fig.savefig("reconstructions.png")
    """
    matplotlib = _figures.import_matplotlib("reconstructions")
    inputs = np.asarray(ops.convert_to_numpy(inputs), dtype="float32")
    outputs = np.asarray(ops.convert_to_numpy(outputs), dtype="float32")
    if inputs.ndim not in (3, 4):
        raise ValueError(
            "Argument inputs must have shape (num_inputs, height, width) "
            "or (num_inputs, height, width, channels). "
            f"Received: inputs.shape={inputs.shape}"
        )
    if inputs.ndim == 4:
        _figures.check_displayable(inputs.shape, "inputs")
    num_inputs = inputs.shape[0]
    # Drawn on the fixed scale [0, 1]: other values would be clipped into
    # a plausible-looking figure of the wrong data.
    check_image_values(inputs, "inputs", value_range=(0, 1))
    check_image_values(outputs, "outputs", value_range=(0, 1))
    outputs, num_outputs = _per_input_outputs(inputs, outputs)
    num_images = check_int(num_images, "num_images", minimum=1, allow_none=True)
    if num_images is None:
        num_images = num_inputs
    elif num_images > num_inputs:
        raise ValueError(
            f"Argument num_images must be at most the {num_inputs} inputs "
            f"given. Received: num_images={num_images}"
        )
    titles = _figures.check_names(titles, num_images, "titles", "column")
    if output_names is not None and num_outputs == 1:
        raise ValueError(
            "Argument output_names names the reconstructions of one input "
            "in a colour image and needs outputs of shape (num_inputs, K, "
            f"height, width). Received: output_names={output_names!r} with "
            f"outputs.shape={outputs.shape}"
        )
    output_names = _figures.check_names(
        output_names, num_outputs, "output_names", "reconstruction"
    ) or [f"reconstruction {k + 1}" for k in range(num_outputs)]

    size = _figures.PANEL_SIZE * 1.2
    legend_height = 0.4 if num_outputs > 1 else 0.0
    fig = _figures.new_figure(
        matplotlib, num_images * size + 1.0, 2 * size + 0.4 + legend_height
    )
    axes = fig.subplots(2, num_images, squeeze=False)
    for column in range(num_images):
        _figures.show_image(axes[0, column], inputs[column])
        if num_outputs == 1:
            _figures.show_image(axes[1, column], outputs[column, 0])
        else:
            _figures.show_image(
                axes[1, column], _overlay(outputs[column, ..., 0])
            )
        if titles is not None:
            axes[0, column].set_title(titles[column], fontsize="small")
    axes[0, 0].set_ylabel("input", fontsize="small")
    axes[1, 0].set_ylabel("reconstruction", fontsize="small")
    if num_outputs > 1:
        handles = [
            matplotlib.patches.Patch(color=rgb, label=f"{name} ({color})")
            for (color, rgb), name in zip(_COLORS.items(), output_names)
        ]
        fig.legend(
            handles=handles,
            loc="outside lower center",
            ncols=num_outputs,
            fontsize="small",
            frameon=False,
        )
    return fig


def _per_input_outputs(inputs, outputs):
    """`outputs` as `(num_inputs, K, height, width, channels)`, and `K`."""
    num_inputs, height, width = inputs.shape[:3]
    image_shape = inputs.shape[1:]
    gray_shapes = ((height, width), (height, width, 1))
    if image_shape in gray_shapes:
        single_shapes = gray_shapes
    else:
        single_shapes = (image_shape,)
    if outputs.shape[:1] == (num_inputs,):
        if outputs.shape[1:] in single_shapes:
            single = outputs.reshape((num_inputs, 1, height, width, -1))
            return single, 1
        if (
            outputs.ndim in (4, 5)
            and outputs.shape[2:] in gray_shapes
            and 1 <= outputs.shape[1] <= len(_COLORS)
        ):
            return outputs.reshape(outputs.shape[:4] + (1,)), outputs.shape[1]
    raise ValueError(
        "Argument outputs must hold one reconstruction per input, of the "
        f"shape of inputs, {inputs.shape}, or 1 to 3 gray reconstructions "
        f"per input, of shape ({num_inputs}, K, {height}, {width}) or "
        f"({num_inputs}, K, {height}, {width}, 1). "
        f"Received: outputs.shape={outputs.shape}"
    )


def _overlay(images):
    """`K` gray images `(K, height, width)` as channels of one RGB image."""
    color = np.zeros(images.shape[1:] + (3,), dtype="float32")
    color[..., : images.shape[0]] = np.moveaxis(images, 0, -1)
    return color
