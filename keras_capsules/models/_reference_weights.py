"""The weight files of the authors' Efficient-CapsNet code.

`EfficientCapsNet.from_reference_weights` reads the `.h5` files of
EscVM/Efficient-CapsNet (`bin/efficient_capsnet_{MNIST,MULTIMNIST,
SMALLNORB}.h5`), which Keras 2's `Model.save_weights` wrote in HDF5:

- the root attribute `layer_names` lists the model's top-level layers in
  order, each with a group of its name; a group's attribute
  `weight_names` lists the layer's weights in order (none for inputs and
  masks), each stored at that name inside the group, so
  `conv2d/kernel:0` of the group `g` is the dataset `g/conv2d/kernel:0`;
- the authors' training graph nests two models, the capsule network
  (`Efficient_CapsNet` in their code, `CapsNet` in their smallNORB file)
  and the decoder (`Generator`); the group of a nested model holds the
  weights of all its layers: the trainable ones first, layer after
  layer, then the non-trainable ones (the batch normalisation
  statistics);
- a file saved from the capsule network alone has a group per layer, and
  a whole model saved to `.h5` keeps these groups under `model_weights`.

Layers are told apart by the names of their weights, which the layer
classes fix (`kernel` and `bias`; `gamma` and `beta`, with
`moving_mean` and `moving_variance` for batch normalisation; `W` and `b`
for `FCCaps`), and matched to this package's layers by their order. The
layer names, which Keras numbers per session, are not used. Two layers
store their weights in another layout: the primary capsules' grouped
convolution has a `(k, k, 1, channels)` kernel, the depthwise kernel
`(k, k, channels, 1)`, and `FCCaps` keeps its matrices as `(num_out,
num_in, dim_in, dim)` and its prior as `(num_out, num_in, 1)`, where
`SelfAttentionCaps` has `(num_in, num_out, dim_in, dim)` and
`(num_in, num_out)`.
"""

import os
import warnings

import keras
import numpy as np

from keras_capsules._validation import check_option

# The weights of each kind of layer, by their names in the file (without
# the layer's name and the `:0`).
KERNEL_AND_BIAS = ("kernel", "bias")
BATCH_NORM = ("gamma", "beta", "moving_mean", "moving_variance")
INSTANCE_NORM = ("gamma", "beta")
FC_CAPS = ("W", "b")


def from_reference_weights(cls, path, preset="mnist", **kwargs):
    """Builds a preset's network with the weights of the authors' code.

    Reads a weight file of the authors' TensorFlow code,
    `bin/efficient_capsnet_{MNIST,MULTIMNIST,SMALLNORB}.h5` (Keras 2
    `save_weights` in HDF5), into the architecture preset it was trained
    as. The weights are matched by the order and kind of their layers,
    not by their names, checked against this network's shapes and
    rearranged into its layout. The model then computes the authors'
    network, on every backend; the one difference is the squash's
    epsilon (docs/self_attention_routing.md). It expects the authors'
    inputs: MNIST pixels divided by 256, MultiMNIST pixels by 255, and
    for smallNORB each of the two images standardised with the mean and
    standard deviation of its split.

    A file that holds only the capsule network loads into it; the decoder
    keeps its initial weights and a warning says so, unless the model is
    built without one (`decoder_type=None`).

    Args:
        path: Path to the `.h5` file (a file of `save_weights`, or of
            `save` in Keras 2's HDF5 format).
        preset: `"mnist"`, `"multimnist"` or `"smallnorb"`, the network
            the file holds. Defaults to `"mnist"`.
        **kwargs: Other constructor arguments, such as `name` or
            `decoder_type=None`; those that change the architecture make
            the file's weights no longer fit.

    Returns:
        An uncompiled `EfficientCapsNet`.

    Raises:
        TypeError: If `path` is not a path.
        FileNotFoundError: If there is no file at `path`.
        ValueError: If `preset` is not one of the above, or if the file
            does not hold that preset's network: a layer missing or of
            another kind, or weights of other shapes (nothing is loaded).

    Example:

    ```python
    model = keras_capsules.models.EfficientCapsNet.from_reference_weights(
        "Efficient-CapsNet/bin/efficient_capsnet_MNIST.h5", preset="mnist"
    )
    lengths = model.predict(images / 256)  # (n, 28, 28, 1) uint8 digits
    reconstructions = model.reconstruct(images / 256)
    ```

    Reference:
        - [The authors' TensorFlow code](
          https://github.com/EscVM/Efficient-CapsNet)
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"Argument path must be a path to a file. Received: path={path!r}"
        )
    architectures = {
        name: entry["config"]
        for name, entry in cls.presets.items()
        if not entry["trained"]
    }
    check_option(preset, "preset", tuple(architectures))
    path = os.path.expanduser(os.fspath(path))
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"There is no file at {path}. Pass the path to the authors' "
            f".h5 weight file. Received: path={path!r}"
        )
    layers = read_layers(path)
    model = cls(**{**architectures[preset], **kwargs})
    assignments, has_decoder = match(model, layers, preset, path)
    for variable, value in assignments:
        variable.assign(value)
    if model.decoder is not None and not has_decoder:
        warnings.warn(
            f"{path} holds no decoder weights: the decoder keeps its "
            "initial weights, so reconstructions are not the authors'. "
            "Pass decoder_type=None to build the model without a decoder.",
            stacklevel=2,
        )
    return model


def read_layers(path):
    """The layers with weights of a Keras 2 HDF5 weight file, in order.

    Returns a list of `(name, {weight: array})`, with the layers of a
    nested model one by one, named `group/layer`.
    """
    import h5py  # A Keras dependency; only needed here.

    try:
        file = h5py.File(path, "r")
    except OSError as error:
        raise ValueError(
            f"{path} is not an HDF5 file ({error}). Expected an .h5 weight "
            f"file of the authors' code. Received: path={path!r}"
        ) from error
    layers = {}
    with file:
        root = file
        if "layer_names" not in file.attrs and "model_weights" in file:
            root = file["model_weights"]
        if "layer_names" not in root.attrs:
            raise ValueError(
                f"{path} is not a Keras 2 HDF5 weight file: it has no "
                "layer_names attribute (a Keras 3 .weights.h5 file loads "
                f"with model.load_weights). Received: path={path!r}"
            )
        for group_name in decode(root.attrs["layer_names"]):
            group = root.get(group_name)
            if group is None or "weight_names" not in group.attrs:
                raise ValueError(
                    f"{path} lists the layer {group_name} but has no weight "
                    f"list for it. Received: path={path!r}"
                )
            for weight_name in decode(group.attrs["weight_names"]):
                layer, _, weight = weight_name.rpartition("/")
                name = f"{group_name}/{layer}" if layer else group_name
                weights = layers.setdefault(name, {})
                weight = weight.split(":")[0]
                if weight_name not in group:
                    raise ValueError(
                        f"{path} lists the weight {weight_name} of layer "
                        f"{group_name} but does not store it. "
                        f"Received: path={path!r}"
                    )
                if weight in weights:
                    raise ValueError(
                        f"{path} has two weights named {weight} in the "
                        f"layer {name}. Received: path={path!r}"
                    )
                weights[weight] = np.asarray(group[weight_name])
    return list(layers.items())


def decode(names):
    return [
        name.decode("utf8") if isinstance(name, bytes) else str(name)
        for name in names
    ]


def match(model, layers, preset, path):
    """Pairs the file's weights with the model's variables.

    Returns `(assignments, has_decoder)`: a list of `(variable, array)`,
    every array checked and in the variable's layout and dtype, and
    whether the file holds a decoder. Raises a `ValueError` before
    anything is assigned if the file does not fit the model.
    """
    found = [
        index
        for index, (_, weights) in enumerate(layers)
        if sorted(weights) == sorted(FC_CAPS)
    ]
    if len(found) != 1:
        raise file_error(
            preset,
            path,
            f"it holds {len(found)} layers with the weights W and b of the "
            "authors' FCCaps, where the network has one",
        )
    end = found[0] + 1
    has_decoder = end < len(layers)
    encoder, decoder = targets(model)
    parts = [("capsule network", encoder, layers[:end])]
    if model.decoder is not None and has_decoder:
        parts.append(("decoder", decoder, layers[end:]))
    assignments = []
    for part, ours, theirs in parts:
        if len(ours) != len(theirs):
            raise file_error(
                preset,
                path,
                f"its {part} has {len(theirs)} layers with weights, where "
                f"this one has {len(ours)}",
            )
        for (name, weights), (their_name, arrays) in zip(ours, theirs):
            expected = [weight for weight, *_ in weights]
            if sorted(arrays) != sorted(expected):
                raise file_error(
                    preset,
                    path,
                    f"its layer {their_name} holds the weights "
                    f"{', '.join(arrays)} where the layer {name} has "
                    f"{', '.join(expected)}",
                )
            for weight, variable, shape, convert in weights:
                value = arrays[weight]
                if value.shape != shape:
                    raise file_error(
                        preset,
                        path,
                        f"its weight {their_name}/{weight} has shape "
                        f"{value.shape} where the layer {name} needs {shape}",
                    )
                value = np.asarray(convert(value), dtype=variable.dtype)
                assignments.append((variable, value))
    return assignments, has_decoder


def file_error(preset, path, reason):
    return ValueError(
        f"The file does not hold the authors' {preset} network: {reason}. "
        'Pass the preset ("mnist", "multimnist" or "smallnorb") that the '
        "file was trained as, without arguments that change the "
        f"architecture. Received: path={path!r}"
    )


def targets(model):
    """The layers with weights of the encoder and of the decoder, in the
    authors' order: each `(name, [(weight, variable, shape in the file,
    conversion to the variable's layout)])`."""
    encoder = []
    for layer in model.features:
        if isinstance(layer, keras.layers.Conv2D):
            encoder.append(as_stored(layer, KERNEL_AND_BIAS))
        elif isinstance(layer, keras.layers.BatchNormalization):
            encoder.append(as_stored(layer, BATCH_NORM))
        elif isinstance(layer, keras.layers.GroupNormalization):
            encoder.append(as_stored(layer, INSTANCE_NORM))
    primary = model.primary_caps
    height, width, channels, multiplier = primary.kernel.shape
    encoder.append(
        (
            primary.name,
            [
                # Output channel c * multiplier + m of the grouped
                # convolution filters input channel c, as in the depthwise
                # one.
                (
                    "kernel",
                    primary.kernel,
                    (height, width, 1, channels * multiplier),
                    lambda value: value.reshape(primary.kernel.shape),
                ),
                ("bias", primary.bias, tuple(primary.bias.shape), same),
            ],
        )
    )
    digit = model.digit_caps
    num_in, num_out, dim_in, dim = digit.kernel.shape
    encoder.append(
        (
            digit.name,
            [
                (
                    "W",
                    digit.kernel,
                    (num_out, num_in, dim_in, dim),
                    lambda value: value.transpose(1, 0, 2, 3),
                ),
                (
                    "b",
                    digit.prior,
                    (num_out, num_in, 1),
                    lambda value: value[..., 0].T,
                ),
            ],
        )
    )
    decoder = []
    if model.decoder is not None:
        decoder = [
            as_stored(layer, KERNEL_AND_BIAS)
            for layer in model.decoder.layers
            if layer.weights
        ]
    return encoder, decoder


def as_stored(layer, names):
    """A layer whose weights the file holds in the variables' layout."""
    variables = [getattr(layer, name) for name in names]
    return (
        layer.name,
        [
            (name, variable, tuple(variable.shape), same)
            for name, variable in zip(names, variables)
        ],
    )


def same(value):
    return value
