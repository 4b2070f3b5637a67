"""Public models of keras_capsules."""

from keras_capsules.models import _presets
from keras_capsules.models.capsnet import CapsNet
from keras_capsules.models.efficient_capsnet import EfficientCapsNet
from keras_capsules.models.matrix_capsnet import MatrixCapsNet
from keras_capsules.models.stacked_capsule_autoencoder import (
    StackedCapsuleAutoencoder,
)


def from_preset(preset, load_weights=True, **kwargs):
    """Builds the model of a trained preset, whatever its class.

    `EfficientCapsNet.from_preset(preset)` and its siblings do the same for
    one class (and also take the names of their architectures); this
    function reads the class from the preset itself, as
    `keras.models.load_model` does for a `.keras` file.

    Args:
        preset: The name of a trained preset shipped with the package (see
            `list_presets()`) or a path to a directory written by
            `save_to_preset`.
        load_weights: Whether to load the preset's weights. Defaults to
            `True`.
        **kwargs: Constructor arguments overriding the preset's; one
            that changes the shape of some weights (`num_classes=5`)
            keeps the trained weights of the layers it leaves unchanged
            and starts the others afresh, as `CapsNet.from_preset` says.

    Returns:
        An uncompiled `CapsNet`, `EfficientCapsNet`, `MatrixCapsNet` or
        `StackedCapsuleAutoencoder`.

    Raises:
        ValueError: If `preset` is neither a shipped preset's name nor a
            preset directory of one of these classes, or a file of the
            preset is damaged or belongs to another network (the message
            names the file).
        FileNotFoundError: If a preset directory lacks its weights file
            and `load_weights=True`.

    Example:

    >>> import keras_capsules
    >>> model = keras_capsules.models.from_preset("efficient_capsnet_mnist")
    >>> type(model).__name__
    'EfficientCapsNet'

    Five classes instead of ten: the trained convolutions and primary
    capsules, new class capsules.

    >>> model = keras_capsules.models.from_preset(
    ...     "capsnet_mnist", num_classes=5
    ... )
    >>> model.output_shape
    (None, 5)
    """
    directory = _presets.resolve_directory(preset)
    class_name = None
    if directory is not None:
        class_name = _presets.read_config(directory).get("class_name")
    if class_name not in _MODELS:
        raise ValueError(
            "Argument preset must be the name of a shipped preset ("
            + ", ".join(_presets.built_in_names())
            + ") or a directory holding a preset of "
            + ", ".join(_MODELS)
            + f". Received: preset={preset!r}"
        )
    return _MODELS[class_name].from_preset(
        directory, load_weights=load_weights, **kwargs
    )


def list_presets(model=None):
    """The trained presets shipped with the package, with their metadata.

    Each preset loads offline with `from_preset(name)` on the model class
    its metadata names (`class_name`); docs/presets.md tables them with
    their accuracy and training command.

    Args:
        model: Optional model class (or its name) to list only its
            presets. Defaults to `None`, all of them.

    Returns:
        A dict `{name: metadata}`; each metadata is a dict with
        `class_name`, the data set, the accuracy, the training command and
        the other fields `save_to_preset` records.

    Example:

    >>> import keras_capsules
    >>> presets = keras_capsules.models.list_presets("EfficientCapsNet")
    >>> presets["efficient_capsnet_mnist"]["dataset"]
    'mnist'
    """
    if isinstance(model, type):
        model = model.__name__
    if model is not None and not isinstance(model, str):
        raise TypeError(
            "Argument model must be a model class, its name or None. "
            f"Received: model={model!r}"
        )
    return _presets.list_all(model)


_MODELS = {
    cls.__name__: cls
    for cls in (
        CapsNet,
        EfficientCapsNet,
        MatrixCapsNet,
        StackedCapsuleAutoencoder,
    )
}
