"""Private helpers shared by the figure functions: the lazy matplotlib
import, argument checks and the common look of image panels.

matplotlib is an optional extra of keras_capsules, so it is imported here
inside functions, and only by this subpackage.
"""

import keras
import numpy as np

from keras_capsules._validation import check_image_values

# The side of one image panel, in inches: a 28x28 image stays legible.
PANEL_SIZE = 0.9
IMAGE_STYLE = {"cmap": "gray", "vmin": 0.0, "vmax": 1.0}
ACTIVATION_STYLE = {"cmap": "viridis", "vmin": 0.0, "vmax": 1.0}
_DISPLAY_CHANNELS = (1, 3)


def import_matplotlib(function_name):
    """Returns the `matplotlib` module with `figure` and `patches` loaded,
    or raises an actionable ImportError."""
    try:
        import matplotlib
        import matplotlib.figure
        import matplotlib.patches
    except ImportError as error:
        raise ImportError(
            f"`{function_name}` draws with matplotlib, which could not be "
            f"imported ({error}). Install the optional extra with "
            "`pip install keras-capsules[visualization]`."
        ) from error
    return matplotlib


def new_figure(matplotlib, width, height):
    """A figure outside pyplot: no global state, works headless."""
    return matplotlib.figure.Figure(
        figsize=(width, height), layout="constrained"
    )


def check_model(model, *model_classes):
    """Raises `TypeError` unless `model` is an instance of one of
    `model_classes`."""
    if not isinstance(model, model_classes):
        expected = " or ".join(
            f"keras_capsules.models.{cls.__name__}" for cls in model_classes
        )
        raise TypeError(
            f"Argument model must be a {expected}. "
            f"Received: model={type(model).__name__}"
        )


def check_image(image, model):
    """Returns one image of the model's input shape as a float32 array,
    finite.

    A single-channel model also accepts `(height, width)`. The range is
    not checked: the image goes through the model, whose input
    convention (`[0, 1]`, standardised, ...) only its training knows.
    """
    image_shape = tuple(model.inputs[0].shape[1:])
    image = np.asarray(keras.ops.convert_to_numpy(image), dtype="float32")
    if image.shape == image_shape[:2] and image_shape[2] == 1:
        image = image[..., None]
    if image.shape != image_shape:
        accepted = f"{image_shape}"
        if image_shape[2] == 1:
            accepted += f" or {image_shape[:2]}"
        raise ValueError(
            "Argument image must be one image of the model's input shape, "
            f"{accepted}, without a batch axis. "
            f"Received: image.shape={image.shape}"
        )
    check_image_values(image, "image")
    return image


def check_displayable(shape, name):
    """Raises unless images of `shape`, channels last, can be drawn."""
    if shape[-1] not in _DISPLAY_CHANNELS:
        raise ValueError(
            f"Argument {name} must have 1 (gray) or 3 (RGB) channels to be "
            f"drawn. Received: {name}.shape={shape}"
        )


def check_names(names, count, name, item):
    """Returns `names` as a list of `count` strings, or `None` if `None`;
    `item` is what each name stands for, for the message."""
    if names is None:
        return None
    if not isinstance(names, (list, tuple)) or len(names) != count:
        raise ValueError(
            f"Argument {name} must be None or a list of {count} strings, "
            f"one per {item}. Received: {name}={names!r}"
        )
    return [str(n) for n in names]


def display_array(image):
    """`image` clipped to [0, 1], as `(height, width)` for one channel.

    `imshow` ignores `vmin` and `vmax` for RGB images, hence the clip.
    """
    image = np.clip(np.asarray(image, dtype="float32"), 0.0, 1.0)
    if image.ndim == 3 and image.shape[-1] == 1:
        return image[..., 0]
    return image


def show_image(ax, image, **style):
    """Draws `image` without ticks, in gray on [0, 1] unless `style` sets
    another colour map or scale; returns the image artist."""
    artist = ax.imshow(display_array(image), **{**IMAGE_STYLE, **style})
    hide_ticks(ax)
    return artist


def hide_ticks(ax):
    # Not `axis("off")`, which would also hide the row labels that
    # `set_ylabel` puts on the first panel of a row.
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
