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

import datetime
import json
import os
import platform

import keras
import numpy as np

from keras_capsules._validation import check_option
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


def read_json(directory, name):
    with open(os.path.join(directory, name), encoding="utf-8") as f:
        return json.load(f)


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
    return read_json(directory, CONFIG_FILE)


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
    """Builds a `cls` from a preset directory, with its weights if asked."""
    config = read_config(directory)
    if config.get("class_name") != cls.__name__:
        raise ValueError(
            f"The preset in {directory} holds a model of class "
            f"{config.get('class_name')}, not {cls.__name__}; load it with "
            f"{config.get('class_name')}.from_preset. "
            f"Received: preset={directory!r}"
        )
    model = cls.from_config({**config["config"], **overrides})
    if load_weights:
        weights = os.path.join(directory, WEIGHTS_FILE)
        if not os.path.isfile(weights):
            raise FileNotFoundError(
                f"The preset in {directory} has no {WEIGHTS_FILE}; pass "
                f"load_weights=False for the network alone. "
                f"Received: preset={directory!r}"
            )
        model.load_weights(weights)
    return model


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
    # weights alone.
    copy = type(model).from_config(model.get_config())
    copy.set_weights(model.get_weights())
    copy.save_weights(weights, overwrite=True)
    if weights_dtype != "float32":
        cast_weights_file(weights, weights_dtype)
    with open(
        os.path.join(directory, METADATA_FILE), "w", encoding="utf-8"
    ) as f:
        f.write(metadata_json + "\n")


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
