"""Figures of a `MatrixCapsNet`: where each capsule type is active."""

import keras
import numpy as np

from keras_capsules._validation import check_int
from keras_capsules.models.matrix_capsnet import MatrixCapsNet
from keras_capsules.visualization import _figures

# The capsule layers drawn, one row each, in the order of the network.
_GRID_LAYERS = ("primary_caps", "conv_caps1", "conv_caps2")


def activation_maps(model, image, max_types=None, class_names=None):
    """Draws the activation of every capsule of a `MatrixCapsNet`.

    Each matrix capsule has a 4x4 pose and an activation `a` in `[0, 1]`,
    the probability that its entity is present: a sigmoid of a linear map
    of the features for the primary capsules, and, in the routed layers,
    the sigmoid of the M-step of EM routing (Procedure 1 of Hinton et al.
    2018), `a_j = sigmoid(lambda (beta_a - sum_h cost_j^h))` in the
    paper's form. For one image the figure shows, for each convolutional
    capsule layer (`primary_caps`, `conv_caps1`, `conv_caps2`) and each
    capsule type `t`, the map `a[y, x, t]` over the layer's spatial grid,
    and the activations of the class capsules (`class_caps`), which are
    the model's output, as a bar chart.

    The activations come from one forward pass, in `predict`'s compiled
    batches, of a model sharing the layers and weights of `model`.

    Paper: [Matrix capsules with EM routing](
    https://openreview.net/forum?id=HJWLfGWRb) (Hinton, Sabour & Frosst,
    2018).

    Args:
        model: A `keras_capsules.models.MatrixCapsNet`, normally trained.
        image: One image of the model's input shape
            `(height, width, channels)`, without a batch axis; a
            one-channel image may also be `(height, width)`.
        max_types: Positive integer, the most capsule types drawn per
            layer (the first ones), or `None` for all of them. The paper's
            network has 32 types per layer. Defaults to `None`.
        class_names: List of `num_classes` strings for the bar labels, or
            `None` for the class indices. Defaults to `None`.

    Returns:
        A `matplotlib.figure.Figure` with one row per capsule layer and
        one column per capsule type (layers with fewer types leave cells
        empty), each panel titled with the type index and the layer and
        grid size as row labels, all on one colour scale `[0, 1]` with a
        colorbar; and a last row with a bar per class. Save it with
        `fig.savefig(path)`.

    Raises:
        ImportError: If matplotlib is not installed.
        TypeError: If `model` is not a `MatrixCapsNet`.
        ValueError: If `image` does not have the model's input shape or
            holds NaN or an infinity, or if `max_types` or `class_names` is
            invalid.

    Example:

    ```python
    import keras
    import keras_capsules
    from keras_capsules.visualization import activation_maps

    model = keras.models.load_model("matrix_capsnet.keras")
    fig = activation_maps(model, x_test[0], max_types=16)
    fig.savefig("activations.png")
    ```

    Reference:
    - [Hinton et al., 2018](https://openreview.net/forum?id=HJWLfGWRb),
      Figure 1.
    """
    matplotlib = _figures.import_matplotlib("activation_maps")
    _figures.check_model(model, MatrixCapsNet)
    image = _figures.check_image(image, model)
    max_types = check_int(max_types, "max_types", minimum=1, allow_none=True)
    num_classes = model.num_classes
    class_names = _figures.check_names(
        class_names, num_classes, "class_names", "class"
    ) or [str(j) for j in range(num_classes)]

    layers = [getattr(model, name) for name in _GRID_LAYERS]
    # Each capsule layer returns [poses, activations].
    activation_model = keras.Model(
        model.inputs,
        [layer.output[1] for layer in layers] + [model.outputs[0]],
    )
    *grids, class_activations = activation_model.predict(image[None], verbose=0)
    grids = [np.asarray(grid[0], dtype="float32") for grid in grids]
    class_activations = np.asarray(class_activations[0], dtype="float32")

    num_types = [grid.shape[-1] for grid in grids]
    columns = max(num_types)
    if max_types is not None:
        columns = min(columns, max_types)
    size = _figures.PANEL_SIZE if columns <= 16 else 0.6
    fig = _figures.new_figure(
        matplotlib,
        max(columns * size + 1.8, 5.0),
        # Each row also holds the type indices above its panels.
        len(grids) * (size + 0.3) + 1.5 * size + 1.0,
    )
    spec = fig.add_gridspec(
        len(grids) + 1, columns, height_ratios=[1] * len(grids) + [1.5]
    )
    image_axes = []
    for row, (layer, grid) in enumerate(zip(layers, grids)):
        shown = min(grid.shape[-1], columns)
        for t in range(shown):
            ax = fig.add_subplot(spec[row, t])
            artist = _figures.show_image(
                ax, grid[..., t], **_figures.ACTIVATION_STYLE
            )
            ax.set_title(str(t), fontsize="x-small", pad=2)
            image_axes.append(ax)
        types = f"{grid.shape[-1]} types"
        if shown < grid.shape[-1]:
            types = f"first {shown} of {types}"
        # Horizontal, so that long labels cannot run into the next row.
        image_axes[-shown].set_ylabel(
            f"{layer.name}\n{grid.shape[0]}x{grid.shape[1]}\n{types}",
            fontsize="x-small",
            rotation=0,
            horizontalalignment="right",
            verticalalignment="center",
        )
    fig.colorbar(artist, ax=image_axes, shrink=0.8, label="activation a")

    ax = fig.add_subplot(spec[len(grids), :])
    colors = matplotlib.colormaps[_figures.ACTIVATION_STYLE["cmap"]](
        class_activations
    )
    ax.bar(np.arange(num_classes), class_activations, color=colors)
    ax.set_ylim(0.0, 1.0)
    ax.set_xticks(np.arange(num_classes), class_names, fontsize="small")
    ax.set_ylabel(
        f"{model.class_caps.name}\nactivation",
        fontsize="x-small",
        rotation=0,
        horizontalalignment="right",
        verticalalignment="center",
    )
    ax.tick_params(axis="y", labelsize="x-small")
    fig.suptitle("Capsule activations", fontsize="medium")
    return fig
