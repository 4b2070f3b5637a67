"""Figures of a `CapsNet`: capsule dimensions and routing couplings."""

import math

import keras
import numpy as np
from keras import ops

from keras_capsules._validation import check_int
from keras_capsules._validation import check_positive_number
from keras_capsules.models.capsnet import CapsNet
from keras_capsules.models.efficient_capsnet import EfficientCapsNet
from keras_capsules.ops._tiles import conv_output_size
from keras_capsules.visualization import _figures

# Panels per row of the coupling figure: the input and five classes.
_COUPLING_COLUMNS = 6


def perturbation_grid(
    model, image, label=None, dimensions=None, steps=11, span=0.25
):
    """Draws what each dimension of a class capsule encodes.

    Fig. 4 of Sabour et al. (2017). The class capsule `v` of `label` is
    computed for `image`; for each chosen dimension `d` and each offset
    `delta` in `numpy.linspace(-span, span, steps)`, the decoder
    reconstructs the image from `v` with `v[d]` replaced by `v[d] + delta`
    (all other class capsules masked out, as in training). All
    `len(dimensions) * steps` capsules are decoded in one batch. A trained
    network turns some dimensions into stroke thickness, width, skew or
    local parts of the digit.

    Paper: [Dynamic Routing Between Capsules](
    https://arxiv.org/abs/1710.09829) (Sabour, Frosst & Hinton, 2017).

    Args:
        model: A `keras_capsules.models.CapsNet` or `EfficientCapsNet`
            with a decoder, normally trained.
        image: One image of the model's input shape
            `(height, width, channels)`, without a batch axis; a
            one-channel image may also be `(height, width)`. Values in
            the range the model was trained on (`[0, 1]` for the shipped
            presets), finite.
        label: Integer, the class whose capsule is perturbed, or `None`
            for the predicted class (the longest capsule). Defaults to
            `None`.
        dimensions: List of integers, the capsule dimensions to perturb,
            one row each, or `None` for all `model.capsule_dim`
            dimensions. Defaults to `None`.
        steps: Integer, at least 2, the number of offsets (columns).
            Defaults to `11`.
        span: Positive float, the largest offset. The default and the
            paper's offsets are `-0.25, -0.20, ..., 0.25`. Defaults to
            `0.25`.

    Returns:
        A `matplotlib.figure.Figure` with one row per dimension and one
        column per offset, each panel a reconstruction (gray, values
        `[0, 1]`), the offsets as column titles and `dim d` as row labels.
        Save it with `fig.savefig(path)`.

    Raises:
        ImportError: If matplotlib is not installed.
        TypeError: If `model` is neither a `CapsNet` nor an
            `EfficientCapsNet`.
        ValueError: If the model has no decoder, if `image` does not have
            the model's input shape or holds NaN or an infinity, or if
            another argument is out of range.

    Example:

    ```python
    import keras
    import keras_capsules
    from keras_capsules.visualization import perturbation_grid

    model = keras.models.load_model("capsnet.keras")
    fig = perturbation_grid(model, x_test[0], steps=11, span=0.25)
    fig.savefig("perturbations.png")
    ```

    Reference:
    - [Sabour et al., 2017](https://arxiv.org/abs/1710.09829), Fig. 4.
    """
    matplotlib = _figures.import_matplotlib("perturbation_grid")
    _figures.check_model(model, CapsNet, EfficientCapsNet)
    if model.decoder is None:
        name = model.decoder_argument
        raise ValueError(
            "Argument model must have a decoder to reconstruct the "
            f"perturbed capsules: build the {type(model).__name__} with "
            f"{name} set. Received: model.{name}=None"
        )
    image = _figures.check_image(image, model)
    # The figure draws images of the model's input shape.
    _figures.check_displayable(image.shape, "image")
    label = check_int(label, "label", allow_none=True)
    if label is not None and label >= model.num_classes:
        raise ValueError(
            f"Argument label must be None or a class in [0, "
            f"{model.num_classes}). Received: label={label}"
        )
    dimensions = _check_dimensions(dimensions, model.capsule_dim)
    steps = check_int(steps, "steps", minimum=2)
    span = check_positive_number(span, "span")

    capsules = ops.convert_to_numpy(model.class_capsules(image[None]))
    capsules = capsules.astype("float32")
    if label is None:
        label = int(np.argmax(np.linalg.norm(capsules[0], axis=-1)))
    offsets = np.linspace(-span, span, steps).astype("float32")
    batch = np.repeat(capsules, len(dimensions) * steps, axis=0)
    for row, dimension in enumerate(dimensions):
        batch[row * steps : (row + 1) * steps, label, dimension] += offsets
    labels = np.zeros((len(batch), model.num_classes), dtype="float32")
    labels[:, label] = 1.0
    images = ops.convert_to_numpy(model.decode(batch, labels))

    size = _figures.PANEL_SIZE
    fig = _figures.new_figure(
        matplotlib, steps * size + 0.8, len(dimensions) * size + 0.8
    )
    axes = fig.subplots(len(dimensions), steps, squeeze=False)
    for row, dimension in enumerate(dimensions):
        for column, offset in enumerate(offsets):
            ax = axes[row, column]
            _figures.show_image(ax, images[row * steps + column])
            if row == 0:
                ax.set_title(f"{offset:+.2f}", fontsize="small")
        axes[row, 0].set_ylabel(f"dim {dimension}", fontsize="small")
    fig.suptitle(
        f"Class {label} capsule: offset added to one dimension per row"
    )
    return fig


def coupling_coefficients(model, image, class_names=None, vmax=None):
    """Draws the coupling coefficients of dynamic routing for one image.

    The coupling coefficient `c_ij` is the share of primary capsule `i`'s
    vote that reaches class capsule `j` after the last routing iteration,
    `c_i = softmax_j(b_ij)` (Eq. 3; it sums to 1 over the classes, to less
    with leaky routing). The primary capsules form a grid of
    `height x width` positions with `T = model.num_primary_capsules`
    capsule types at each. For each class `j` the figure shows, at each
    position `(y, x)` of that grid, the coupling **averaged** over the
    types, `mean_t c_(y, x, t), j`, a value in `[0, 1]`. Where routing
    sends the votes of a position to one class, that class's panel is
    bright there; uniform coupling is `1 / num_classes` everywhere
    (`1 / (num_classes + 1)` with leaky routing).

    The coefficients are those the model's `digit_caps` layer returns with
    `return_coupling=True`, on the primary capsules of the model's own
    graph, along with the model's class capsules.

    Paper: [Dynamic Routing Between Capsules](
    https://arxiv.org/abs/1710.09829) (Sabour, Frosst & Hinton, 2017).

    Args:
        model: A `keras_capsules.models.CapsNet`, normally trained.
        image: One image of the model's input shape
            `(height, width, channels)`, without a batch axis; a
            one-channel image may also be `(height, width)`.
        class_names: List of `num_classes` strings for the panel titles,
            or `None` for the class indices. Defaults to `None`.
        vmax: Positive float, the top of the colour scale shared by the
            class panels (the bottom is 0), or `None` for the largest
            value drawn. Defaults to `None`.

    Returns:
        A `matplotlib.figure.Figure`: the input image, then one panel per
        class titled with its name and capsule length `|v_j|`, on one
        colour scale with a colorbar, in rows of six panels. Save it with
        `fig.savefig(path)`.

    Raises:
        ImportError: If matplotlib is not installed.
        TypeError: If `model` is not a `CapsNet`.
        ValueError: If `image` does not have the model's input shape or
            holds NaN or an infinity, or if `class_names` or `vmax` is
            invalid.

    Example:

    ```python
    import keras
    import keras_capsules
    from keras_capsules.visualization import coupling_coefficients

    model = keras.models.load_model("capsnet.keras")
    fig = coupling_coefficients(model, x_test[0])
    fig.savefig("coupling.png")
    ```

    Reference:
    - [Sabour et al., 2017](https://arxiv.org/abs/1710.09829), Procedure 1.
    """
    matplotlib = _figures.import_matplotlib("coupling_coefficients")
    _figures.check_model(model, CapsNet)
    image = _figures.check_image(image, model)
    # The figure draws images of the model's input shape.
    _figures.check_displayable(image.shape, "image")
    num_classes = model.num_classes
    class_names = _figures.check_names(
        class_names, num_classes, "class_names", "class"
    ) or [str(j) for j in range(num_classes)]
    vmax = check_positive_number(vmax, "vmax", allow_none=True)

    primary_caps = model.primary_caps
    digit_caps = model.digit_caps
    # The model's graph up to the primary capsules, sharing its layers.
    primary = keras.Model(model.inputs, digit_caps.input)(
        ops.convert_to_tensor(image[None])
    )
    capsules, coupling = digit_caps(primary, return_coupling=True)
    lengths = np.linalg.norm(ops.convert_to_numpy(capsules)[0], axis=-1)
    # PrimaryCaps orders its capsules by row, then column, then type.
    height, width = conv_output_size(
        tuple(primary_caps.input.shape[1:3]),
        primary_caps.kernel_size,
        primary_caps.strides,
        primary_caps.padding,
    )
    coupling = ops.convert_to_numpy(coupling).astype("float32")
    coupling = coupling.reshape(
        height, width, primary_caps.num_capsules, num_classes
    ).mean(axis=2)
    if vmax is None:
        vmax = float(coupling.max())

    num_panels = num_classes + 1
    columns = min(num_panels, _COUPLING_COLUMNS)
    rows = math.ceil(num_panels / columns)
    size = 1.6
    fig = _figures.new_figure(matplotlib, columns * size + 1.0, rows * size + 1)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax in axes[num_panels:]:
        ax.set_visible(False)
    predicted = int(np.argmax(lengths))
    _figures.show_image(axes[0], image)
    axes[0].set_title(
        f"input\npredicted: {class_names[predicted]}", fontsize="small"
    )
    class_axes = axes[1:num_panels]
    for j, ax in enumerate(class_axes):
        artist = _figures.show_image(
            ax, coupling[..., j], **{**_figures.ACTIVATION_STYLE, "vmax": vmax}
        )
        ax.set_title(
            f"{class_names[j]}\n|v|={lengths[j]:.2g}", fontsize="small"
        )
    fig.colorbar(
        artist,
        ax=list(class_axes),
        shrink=0.8,
        label="coupling, mean over types",
    )
    # Leaky routing adds a leak route to the softmax.
    routes = num_classes + int(digit_caps.leaky_routing)
    fig.suptitle(
        "Coupling coefficients of the last routing iteration, mean over "
        f"{primary_caps.num_capsules} primary capsule types "
        f"(uniform: 1/{routes} = {1 / routes:.2f})",
        fontsize="medium",
    )
    return fig


def _check_dimensions(dimensions, capsule_dim):
    if dimensions is None:
        return list(range(capsule_dim))
    valid = (
        isinstance(dimensions, (list, tuple, range))
        and len(dimensions) > 0
        and all(
            isinstance(d, (int, np.integer))
            and not isinstance(d, bool)
            and 0 <= d < capsule_dim
            for d in dimensions
        )
    )
    if not valid:
        raise ValueError(
            "Argument dimensions must be None or a non-empty list of "
            f"capsule dimensions in [0, {capsule_dim}). "
            f"Received: dimensions={dimensions!r}"
        )
    return [int(d) for d in dimensions]
