"""Figures of a Stacked Capsule Autoencoder: its templates, the parts that
explain an image, and the object capsules' presences by class."""

import numpy as np
from keras import ops

from keras_capsules._validation import check_image_values
from keras_capsules._validation import check_option
from keras_capsules.visualization import _figures

PRESENCE_KINDS = ("posterior", "prior")
# The official clustering features behind each kind.
_PRESENCE_OUTPUTS = {
    "posterior": "object_posterior_presence",
    "prior": "object_presence",
}


def _check_model(model):
    from keras_capsules.models import StackedCapsuleAutoencoder

    _figures.check_model(model, StackedCapsuleAutoencoder)


def _check_images(images, model):
    images = np.asarray(ops.convert_to_numpy(images), dtype="float32")
    if images.shape[1:] != model.image_shape:
        raise ValueError(
            "Argument images must have shape (num_images,) + "
            f"{model.image_shape}, the model's image_shape. "
            f"Received: images.shape={images.shape}"
        )
    check_image_values(images, "images", value_range=(0, 1))
    return images


def learned_templates(model, columns=10):
    """Draws the model's learned templates, one panel each.

    The templates as the decoder holds them (after their activation,
    before any colour), on the scale `[0, 1]`, in the order of the part
    capsules.

    Args:
        model: A `keras_capsules.models.StackedCapsuleAutoencoder`.
        columns: Positive int, panels per row. Defaults to `10`.

    Returns:
        A `matplotlib.figure.Figure`. Save it with `fig.savefig(path)`.

    Raises:
        ImportError: If matplotlib is not installed.
        TypeError: If `model` is not a `StackedCapsuleAutoencoder`.

    Example:

    >>> from keras_capsules.models import StackedCapsuleAutoencoder
    >>> from keras_capsules.visualization import learned_templates
    >>> model = StackedCapsuleAutoencoder(num_parts=12, num_object_capsules=4)
    >>> len(learned_templates(model, columns=6).axes)
    12
    """
    matplotlib = _figures.import_matplotlib("learned_templates")
    _check_model(model)
    templates = ops.convert_to_numpy(model.template_decoder.templates())[0]
    rows = -(-len(templates) // columns)
    size = _figures.PANEL_SIZE * 0.8
    fig = _figures.new_figure(matplotlib, columns * size, rows * size)
    for index, template in enumerate(templates):
        ax = fig.add_subplot(rows, columns, index + 1)
        _figures.show_image(ax, template)
        ax.set_title(str(index), fontsize="x-small")
    return fig


def part_reconstructions(model, images):
    """Draws images, their reconstructions and the parts that explain them.

    Three rows: the images, the part autoencoder's reconstructions
    (`StackedCapsuleAutoencoder.reconstruct`), and every pixel coloured by
    the part capsule whose template explains it (one colour per part,
    the background black), shaded by the reconstruction.

    Args:
        model: A `keras_capsules.models.StackedCapsuleAutoencoder` with one
            channel.
        images: Array `(num_images,) + model.image_shape`, values in
            `[0, 1]`.

    Returns:
        A `matplotlib.figure.Figure`. Save it with `fig.savefig(path)`.

    Raises:
        ImportError: If matplotlib is not installed.
        TypeError: If `model` is not a `StackedCapsuleAutoencoder`.
        ValueError: If `images` do not have the model's image shape or
            hold values outside `[0, 1]`.

    Example:

    >>> import numpy as np
    >>> from keras_capsules.models import StackedCapsuleAutoencoder
    >>> from keras_capsules.visualization import part_reconstructions
    >>> model = StackedCapsuleAutoencoder(
    ...     image_shape=(28, 28, 1),
    ...     num_parts=6,
    ...     num_object_capsules=4,
    ...     object_capsule_dim=8,
    ... )
    >>> fig = part_reconstructions(model, np.zeros((3, 28, 28, 1)))
    >>> len(fig.axes)
    9
    """
    matplotlib = _figures.import_matplotlib("part_reconstructions")
    _check_model(model)
    images = _check_images(images, model)
    reconstruction, parts = model.reconstruct(images, return_parts=True)
    reconstruction = ops.convert_to_numpy(reconstruction)
    parts = ops.convert_to_numpy(parts)[..., 0]
    colours = matplotlib.colormaps["tab20"](np.arange(model.num_parts) % 20)[
        :, :3
    ]
    colours = np.concatenate([colours, np.zeros((1, 3))])
    shade = np.clip(reconstruction.mean(-1, keepdims=True), 0.0, 1.0)
    coloured = colours[parts] * (0.25 + 0.75 * shade)
    size = _figures.PANEL_SIZE * 1.2
    fig = _figures.new_figure(matplotlib, len(images) * size + 1.0, 3 * size)
    axes = fig.subplots(3, len(images), squeeze=False)
    for column in range(len(images)):
        _figures.show_image(axes[0, column], images[column])
        _figures.show_image(axes[1, column], reconstruction[column])
        _figures.show_image(axes[2, column], coloured[column])
    for row, name in enumerate(("input", "reconstruction", "parts")):
        axes[row, 0].set_ylabel(name, fontsize="small")
    return fig


def object_presence_by_class(model, images, labels, kind="posterior"):
    """Draws the object capsules' mean presence for every class.

    A `num_classes x num_object_capsules` image: row `c` is the mean, over
    the images of class `c`, of each object capsule's presence, divided by
    the largest mean of the figure. On a model that learned digits, each class
    lights up its own few capsules.

    Args:
        model: A `keras_capsules.models.StackedCapsuleAutoencoder`.
        images: Array `(num_images,) + model.image_shape`, values in
            `[0, 1]`.
        labels: Int array `(num_images,)` of class indices.
        kind: `"posterior"` (the part mass each object explains, the
            official clustering feature) or `"prior"` (the object
            presences). Defaults to `"posterior"`.

    Returns:
        A `matplotlib.figure.Figure`. Save it with `fig.savefig(path)`.

    Raises:
        ImportError: If matplotlib is not installed.
        TypeError: If `model` is not a `StackedCapsuleAutoencoder`.
        ValueError: If the images or labels do not fit the model, or
            `kind` is unknown.

    Example:

    >>> import numpy as np
    >>> from keras_capsules.models import StackedCapsuleAutoencoder
    >>> from keras_capsules.visualization import object_presence_by_class
    >>> model = StackedCapsuleAutoencoder(
    ...     image_shape=(28, 28, 1),
    ...     num_parts=6,
    ...     num_object_capsules=4,
    ...     object_capsule_dim=8,
    ... )
    >>> images = np.zeros((20, 28, 28, 1))
    >>> fig = object_presence_by_class(model, images, np.arange(20) % 10)
    >>> fig.axes[0].images[0].get_array().shape
    (10, 4)
    """
    matplotlib = _figures.import_matplotlib("object_presence_by_class")
    _check_model(model)
    check_option(kind, "kind", PRESENCE_KINDS)
    images = _check_images(images, model)
    labels = np.asarray(labels).reshape(-1)
    if len(labels) != len(images) or not np.all(
        (labels >= 0) & (labels < model.num_classes)
    ):
        raise ValueError(
            "Argument labels must hold one class index in [0, "
            f"{model.num_classes}) per image. "
            f"Received: labels.shape={labels.shape}"
        )
    outputs = model.predict(images, batch_size=100, verbose=0)
    presence = outputs[_PRESENCE_OUTPUTS[kind]]
    means = np.zeros((model.num_classes, model.num_object_capsules))
    for label in range(model.num_classes):
        if np.any(labels == label):
            means[label] = presence[labels == label].mean(0)
    means = means / max(means.max(), 1e-12)
    fig = _figures.new_figure(
        matplotlib,
        1.5 + 0.2 * model.num_object_capsules,
        1.0 + 0.25 * model.num_classes,
    )
    ax = fig.add_subplot()
    artist = ax.imshow(means, **_figures.ACTIVATION_STYLE)
    ax.set_xlabel("object capsule")
    ax.set_ylabel("class")
    ax.set_yticks(range(model.num_classes))
    ax.set_title(f"mean {kind} presence", fontsize="small")
    fig.colorbar(artist, ax=ax, shrink=0.8)
    return fig
