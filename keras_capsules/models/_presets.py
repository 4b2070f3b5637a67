"""Preset directories: a model's config, weights and metadata on disk.

A preset directory holds three files, the layout of keras-hub's
`save_to_preset`:

- `config.json`: the serialized model (`keras.saving.serialize_keras_object`),
- `model.weights.h5`: the model's weights, without optimizer state, stored
  in float32 or, to halve the file, float16; they load into the model's own
  variables,
- `metadata.json`: what the weights are: the data, the accuracy, the
  command that trained them, the machine, the versions.

The trained presets that ship with the package are such directories under
`keras_capsules/presets/`.
"""

import collections
import contextlib
import datetime
import json
import os
import platform

import keras
import numpy as np

from keras_capsules._validation import check_option
from keras_capsules.layers._presence_noise import SEED_STATE_KEY
from keras_capsules.ops._backend import backend_name
from keras_capsules.version import __version__

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
METADATA_FILE = "metadata.json"
WEIGHTS_DTYPES = ("float32", "float16")

BUILT_IN_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "presets"
)


def built_in_names():
    """The names of the trained presets shipped in the package, sorted."""
    if not os.path.isdir(BUILT_IN_DIR):
        return []
    return sorted(
        name
        for name in os.listdir(BUILT_IN_DIR)
        if os.path.isfile(os.path.join(BUILT_IN_DIR, name, CONFIG_FILE))
    )


def list_all(class_name=None):
    """`{name: metadata}` of the built-in trained presets, optionally only
    those of one model class."""
    listing = {
        name: read_metadata(os.path.join(BUILT_IN_DIR, name))
        for name in built_in_names()
    }
    if class_name is None:
        return listing
    return {
        name: metadata
        for name, metadata in listing.items()
        if metadata["class_name"] == class_name
    }


def is_built_in(directory):
    """Whether `directory` is a trained preset shipped in the package."""
    parent = os.path.dirname(os.path.abspath(os.fspath(directory)))
    return parent == os.path.abspath(BUILT_IN_DIR)


def repair_advice(directory):
    """How to replace a broken file of the preset in `directory`."""
    if is_built_in(directory):
        return (
            "Reinstall the package (`pip install --force-reinstall "
            "keras-capsules`) to restore the preset it ships"
        )
    return "Save the preset again with `save_to_preset`"


# The names a JSON document gives the Python values `json.load` returns.
_JSON_TYPES = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def read_json(directory, name):
    """The JSON object in the file `name` of a preset directory.

    Raises:
        FileNotFoundError: If the file is missing.
        ValueError: If it is not valid UTF-8 JSON or not a JSON object;
            the message names the file and how to replace it.
    """
    path = os.path.join(directory, name)
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except FileNotFoundError as error:
        raise FileNotFoundError(
            f"The preset in {directory} has no {name} (no file {path}). "
            f"{repair_advice(directory)}. Received: preset={directory!r}"
        ) from error
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(
            f"The preset file {path} is not valid JSON ({error}): it is "
            "truncated or was overwritten. "
            f"{repair_advice(directory)}. Received: preset={directory!r}"
        ) from error
    if not isinstance(value, dict):
        raise ValueError(
            f"The preset file {path} holds "
            f"{_JSON_TYPES.get(type(value), type(value).__name__)}, not "
            "the JSON object of a preset: it was overwritten. "
            f"{repair_advice(directory)}. Received: preset={directory!r}"
        )
    return value


def read_metadata(directory):
    """The metadata of a trained preset directory, with its `class_name`
    and `"trained": True`."""
    metadata = read_json(directory, METADATA_FILE)
    return {
        "class_name": read_config(directory)["class_name"],
        "trained": True,
        **metadata,
    }


def read_config(directory):
    """The serialized model of a preset directory: a dict with a
    `class_name` string and a `config` dict."""
    config = read_json(directory, CONFIG_FILE)
    if not isinstance(config.get("class_name"), str) or not isinstance(
        config.get("config"), dict
    ):
        path = os.path.join(directory, CONFIG_FILE)
        raise ValueError(
            f"The preset file {path} is not a serialized model: it needs "
            'the "class_name" string and the "config" object that '
            "`save_to_preset` writes; it has the keys "
            f"{sorted(config)}. {repair_advice(directory)}. "
            f"Received: preset={directory!r}"
        )
    return config


def resolve_directory(preset):
    """The directory of `preset`: a built-in trained preset's name or a
    path to a preset directory; `None` when it is neither."""
    if isinstance(preset, str) and preset in built_in_names():
        return os.path.join(BUILT_IN_DIR, preset)
    if isinstance(preset, (str, os.PathLike)):
        path = os.path.expanduser(os.fspath(preset))
        if os.path.isfile(os.path.join(path, CONFIG_FILE)):
            return path
    return None


def load(cls, directory, load_weights, overrides):
    """Builds a `cls` from a preset directory, with its weights if asked.

    When `overrides` change the shape of some weights (`num_classes`,
    `image_shape`, ...), the weights load into the preset's own network
    and every layer whose weights all keep their shapes takes them (see
    `transfer_weights`); the other layers keep their initial values.
    """
    config = read_config(directory)
    if config["class_name"] != cls.__name__:
        raise ValueError(
            f"The preset in {directory} holds a model of class "
            f"{config['class_name']}, not {cls.__name__}; load it with "
            f"{config['class_name']}.from_preset. "
            f"Received: preset={directory!r}"
        )
    model = cls.from_config({**config["config"], **overrides})
    if not load_weights:
        return model
    if not overrides:
        load_weights_file(model, directory)
        return model
    preset_model = cls.from_config(config["config"])
    if weight_shapes(preset_model) == weight_shapes(model):
        load_weights_file(model, directory)
    else:
        load_weights_file(preset_model, directory)
        transfer_weights(preset_model, model)
    return model


def weight_shapes(model):
    return [
        (variable.path, tuple(variable.shape)) for variable in model.weights
    ]


def layer_weights(model):
    """`{layer path: [variables]}`, a model's weights grouped by the layer
    that holds them (the model itself for its own, at `""`)."""
    groups = {}
    for variable in model.weights:
        groups.setdefault(variable.path.rpartition("/")[0], []).append(variable)
    return groups


def transfer_weights(source, target):
    """Copies the weights of every layer of `source` into the layer of
    `target` at the same path whose weights have the same shapes, and
    returns the paths of the layers copied."""
    sources = layer_weights(source)
    copied = []
    for path, variables in layer_weights(target).items():
        values = sources.get(path)
        shapes = [tuple(variable.shape) for variable in variables]
        if values is None or [tuple(v.shape) for v in values] != shapes:
            continue
        for variable, value in zip(variables, values):
            variable.assign(value.value)
        copied.append(path)
    return copied


def read_array_shapes(path):
    """The shapes of the weights in an HDF5 weights file, in no particular
    order."""
    import h5py  # A Keras dependency; only needed here.

    shapes = []

    def visit(name, item):
        # The noise generators' states are not weights.
        if isinstance(item, h5py.Dataset) and not name.endswith(SEED_STATE_KEY):
            shapes.append(tuple(item.shape))

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return shapes


def load_weights_file(model, directory):
    """Loads the weights file of a preset directory into `model`, the
    network of its `config.json`.

    Raises:
        FileNotFoundError: If the directory has no weights file.
        ValueError: If the file is not a readable HDF5 file or holds the
            weights of another network; the message names the file and
            how to replace it.
    """
    path = os.path.join(directory, WEIGHTS_FILE)
    advice = (
        f"{repair_advice(directory)}, or pass load_weights=False to build "
        f"the network alone. Received: preset={directory!r}"
    )
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"The preset in {directory} has no weights file (no file "
            f"{path}). {advice}"
        )
    try:
        shapes = read_array_shapes(path)
    except OSError as error:
        raise ValueError(
            f"The preset's weights file {path} is not a readable HDF5 "
            f"file ({error}): it is truncated or was overwritten. {advice}"
        ) from error
    expected = [tuple(variable.shape) for variable in model.weights]
    extra = collections.Counter(shapes) - collections.Counter(expected)
    missing = collections.Counter(expected) - collections.Counter(shapes)
    if extra or missing:
        raise ValueError(
            f"The preset's weights file {path} does not fit the network of "
            f"its {CONFIG_FILE}: the file holds {len(shapes)} arrays, the "
            f"network has {len(expected)} weights (shapes only in the file: "
            f"{_some(extra)}; only in the network: {_some(missing)}). It "
            f"holds the weights of another model or architecture. {advice}"
        )
    try:
        model.load_weights(path)
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(
            f"The preset's weights file {path} does not load into the "
            f"network of its {CONFIG_FILE} ({error}). It holds the weights "
            f"of another model or architecture, or is damaged. {advice}"
        ) from error


def _some(shapes, limit=3):
    """Up to `limit` of the shapes of a `Counter`, for a message."""
    listed = sorted(shapes.elements())
    text = ", ".join(str(shape) for shape in listed[:limit])
    if len(listed) > limit:
        text += f" and {len(listed) - limit} more"
    return text or "none"


def save(model, directory, metadata, weights_dtype):
    """Writes `model` as a preset directory (see the module docstring)."""
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(
            "Argument preset_dir must be a path to a directory. "
            f"Received: preset_dir={directory!r}"
        )
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise TypeError(
            "Argument metadata must be a dict or None. "
            f"Received: metadata={metadata!r}"
        )
    check_option(weights_dtype, "weights_dtype", WEIGHTS_DTYPES)
    try:
        metadata_json = json.dumps(
            {**describe(model, weights_dtype), **metadata}, indent=2
        )
    except TypeError as error:
        raise TypeError(
            "Argument metadata must hold only JSON values (str, numbers, "
            f"bools, None, lists, dicts). Received: metadata={metadata!r}"
        ) from error
    directory = os.path.expanduser(os.fspath(directory))
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(keras.saving.serialize_keras_object(model), f, indent=2)
    weights = os.path.join(directory, WEIGHTS_FILE)
    # `save_weights` of a compiled model also writes the optimizer's
    # variables (two per weight for Adam); an uncompiled copy holds the
    # weights alone. It is built outside any `keras.distribution`: under
    # one that spans several processes, building a model is a collective
    # step that would wait for the other processes, and only one writes.
    with no_distribution():
        copy = type(model).from_config(model.get_config())
        copy.set_weights(model.get_weights())
        copy.save_weights(weights, overwrite=True)
    if weights_dtype != "float32":
        cast_weights_file(weights, weights_dtype)
    with open(
        os.path.join(directory, METADATA_FILE), "w", encoding="utf-8"
    ) as f:
        f.write(metadata_json + "\n")


@contextlib.contextmanager
def no_distribution():
    """Runs its block without the global `keras.distribution`, if any."""
    distribution = keras.distribution.distribution()
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(distribution)


def describe(model, weights_dtype):
    """The metadata fields a preset always has."""
    return {
        "parameters": int(model.count_params()),
        "weights_dtype": weights_dtype,
        "image_shape": list(model.image_shape),
        "backend": backend_name(),
        "keras_version": keras.__version__,
        "keras_capsules_version": __version__,
        "date_saved": datetime.date.today().isoformat(),
        "hardware": describe_hardware(),
    }


def describe_hardware():
    """The CPU model and core count of this machine (best effort)."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} CPU cores"


def cast_weights_file(path, dtype):
    """Rewrites the float32 arrays of a Keras `.weights.h5` file in
    `dtype`; loading casts them back to the variables' dtype."""
    import h5py  # A Keras dependency; only needed here.

    def copy(source, target):
        target.attrs.update(source.attrs)
        for name, item in source.items():
            if isinstance(item, h5py.Group):
                copy(item, target.create_group(name))
                continue
            values = item[()]
            if values.dtype == np.float32:
                values = values.astype(dtype)
            target.create_dataset(name, data=values).attrs.update(item.attrs)

    # A new file: HDF5 does not give back the space of deleted arrays.
    partial = path + ".partial"
    with h5py.File(path, "r") as source, h5py.File(partial, "w") as target:
        copy(source, target)
    os.replace(partial, path)
