"""Presets: `save_to_preset`, `from_preset(directory)`, `list_presets` and
the trained presets shipped in the package."""

import functools
import importlib.util
import json
import os
import re

import h5py
import keras
import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules import models
from keras_capsules.datasets import mnist
from keras_capsules.models import _presets
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests.models.capsnet_test import SMALL_CONFIG as CAPSNET_CONFIG
from tests.models.efficient_capsnet_test import SMALL_CONFIG as EFFICIENT_CONFIG

MATRIX_CONFIG = {
    "image_shape": (24, 24, 1),
    "num_classes": 5,
    **models.MatrixCapsNet.presets["tiny"]["config"],
    "routing_iterations": 1,
}
MODELS = (
    ("capsnet", models.CapsNet, CAPSNET_CONFIG),
    ("efficient_capsnet", models.EfficientCapsNet, EFFICIENT_CONFIG),
    ("matrix_capsnet", models.MatrixCapsNet, MATRIX_CONFIG),
)
_PREDICTIONS = os.path.join(os.path.dirname(__file__), "preset_predictions.npz")
_SHIP_PRESET = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    "scripts",
    "ship_preset.py",
)
# Fields every shipped preset records, beside those `save_to_preset` adds.
_TRAINED_FIELDS = (
    "description",
    "image_shape",
    "pixel_range",
    "dataset",
    "images",
    "test_accuracy",
    "sample_test_accuracy",
    "images_seen",
    "seed",
    "training_minutes",
    "command",
)
# Every name `from_preset` accepts, per class: its architectures, then the
# trained networks shipped in the package.
_ARCHITECTURES = {
    models.CapsNet: (),
    models.EfficientCapsNet: ("mnist", "multimnist", "smallnorb"),
    models.MatrixCapsNet: ("full", "small", "tiny"),
    models.StackedCapsuleAutoencoder: ("scae_mnist", "scae_mnist_fast"),
}
_TRAINED = {
    models.CapsNet: ("capsnet_mnist",),
    models.EfficientCapsNet: ("efficient_capsnet_mnist",),
    models.MatrixCapsNet: ("matrix_capsnet_small_mnist",),
    models.StackedCapsuleAutoencoder: ("stacked_capsule_autoencoder_mnist",),
}
# A shipped preset scores its recorded sample accuracy on every backend,
# less 3 of the 1,000 images.
_SAMPLE_MARGIN = 0.003
# The predictions (class-capsule lengths or activations, an autoencoder's
# posterior object presences) of the first 32 sample images agree with the
# stored ones (from the backend that trained the preset) within this times
# the largest stored value where that is above 1: the autoencoder's
# presences are sums over its 40 parts (up to 20 here), which JAX and
# PyTorch gave 1.9e-5 and 2.0e-5 from TensorFlow's on a 2-core Xeon.
_PREDICTION_ATOL = 1e-5


@functools.cache
def _ship_preset():
    """`scripts/ship_preset.py` as a module (loaded once): its `evaluate`
    scores a shipped preset as it was scored when shipped."""
    spec = importlib.util.spec_from_file_location("ship_preset", _SHIP_PRESET)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _images(config, batch=4):
    rng = np.random.default_rng(0)
    return rng.uniform(size=(batch,) + config["image_shape"]).astype("float32")


def _values(model):
    return [keras.ops.convert_to_numpy(w) for w in model.weights]


def _layers(model):
    """`{layer path: [arrays]}`: a model's weights by the layer holding
    them (the model's own at `""`)."""
    layers = {}
    for variable in model.weights:
        layers.setdefault(variable.path.rpartition("/")[0], []).append(
            keras.ops.convert_to_numpy(variable)
        )
    return layers


def _equal_layers(model, reference):
    """The paths of the layers of `model` whose weights equal those of
    the layer of `reference` at the same path."""
    references = _layers(reference)
    return [
        path
        for path, arrays in _layers(model).items()
        if path in references
        and len(arrays) == len(references[path])
        and all(
            a.shape == b.shape and np.array_equal(a, b)
            for a, b in zip(arrays, references[path])
        )
    ]


# The layers a shipped preset keeps with `num_classes=5`; the others are
# new.
_KEPT_FOR_NEW_CLASSES = {
    "capsnet_mnist": (
        ["conv1", "primary_caps"],
        ["decoder/decoder_dense_1", "decoder/decoder_output"],
    ),
    "efficient_capsnet_mnist": (
        [f"{kind}{i}" for i in range(1, 5) for kind in ("conv", "norm")]
        + ["primary_caps"],
        ["decoder/decoder_dense_1", "decoder/decoder_output"],
    ),
    "matrix_capsnet_small_mnist": (
        ["", "conv1", "primary_caps", "conv_caps1", "conv_caps2"],
        [],
    ),
}
_NEW_FOR_NEW_CLASSES = {
    "capsnet_mnist": ["digit_caps", "decoder/decoder_dense_0"],
    "efficient_capsnet_mnist": ["digit_caps", "decoder/decoder_dense_0"],
    "matrix_capsnet_small_mnist": ["class_caps"],
}


@backend_marks.RUN_ONCE
class SaveToPresetTest(TestCase):
    @parameterized.named_parameters(*MODELS)
    def test_round_trip_keeps_the_weights(self, cls, config):
        model = cls(**config)
        directory = os.path.join(self.get_temp_dir(), "preset")
        model.save_to_preset(directory, metadata={"dataset": "none"})
        self.assertEqual(
            sorted(os.listdir(directory)),
            ["config.json", "metadata.json", "model.weights.h5"],
        )
        loaded = cls.from_preset(directory)
        self.assertIsInstance(loaded, cls)
        self.assertFalse(loaded.compiled)
        self.assertEqual(loaded.get_config(), model.get_config())
        for saved, restored in zip(_values(model), _values(loaded)):
            np.testing.assert_array_equal(saved, restored)
        x = _images(config)
        self.assertAllClose(loaded.predict(x), model.predict(x), atol=0)

    def test_metadata(self):
        model = models.CapsNet(**CAPSNET_CONFIG)
        directory = self.get_temp_dir()
        model.save_to_preset(
            directory, metadata={"dataset": "none", "backend": "mine"}
        )
        with open(os.path.join(directory, "metadata.json")) as f:
            metadata = json.load(f)
        self.assertEqual(metadata["parameters"], model.count_params())
        self.assertEqual(metadata["weights_dtype"], "float32")
        self.assertEqual(
            metadata["image_shape"], list(CAPSNET_CONFIG["image_shape"])
        )
        self.assertEqual(metadata["keras_version"], keras.__version__)
        self.assertIn("keras_capsules_version", metadata)
        self.assertIn("CPU cores", metadata["hardware"])
        # The caller's fields are kept and override the recorded ones.
        self.assertEqual(metadata["dataset"], "none")
        self.assertEqual(metadata["backend"], "mine")

    @parameterized.named_parameters(*MODELS)
    def test_compiled_model_saves_its_weights_only(self, cls, config):
        model = cls(**config)
        model.compile()
        x = _images(config)
        y = np.eye(config["num_classes"], dtype="float32")[
            np.arange(len(x)) % config["num_classes"]
        ]
        model.fit(x, y, batch_size=len(x), epochs=1, verbose=0)
        self.assertEqual(int(model.optimizer.iterations), 1)
        directory = os.path.join(self.get_temp_dir(), "preset")
        model.save_to_preset(directory)
        path = os.path.join(directory, "model.weights.h5")
        arrays, groups = [], []

        def visit(name, item):
            if isinstance(item, h5py.Dataset):
                arrays.append((name, item.dtype, item.size))
            else:
                groups.append(name)

        with h5py.File(path, "r") as f:
            f.visititems(visit)
        # No optimizer state (Adam would add two arrays per weight), no
        # metric state.
        self.assertEqual(len(arrays), len(model.weights))
        self.assertFalse(
            [g for g in groups if "optimizer" in g.split("/")], groups
        )
        self.assertEqual({dtype.name for _, dtype, _ in arrays}, {"float32"})
        parameters = model.count_params()
        self.assertEqual(sum(size for _, _, size in arrays), parameters)
        self.assertBetween(
            os.path.getsize(path),
            4 * parameters - 64 * 1024,
            4 * parameters + 64 * 1024,
        )
        # The trained weights load back into an uncompiled model.
        loaded = cls.from_preset(directory)
        self.assertFalse(loaded.compiled)
        for saved, restored in zip(_values(model), _values(loaded)):
            np.testing.assert_array_equal(saved, restored)

    def test_float16_storage_loads_into_float32_variables(self):
        model = models.EfficientCapsNet(**EFFICIENT_CONFIG)
        half = os.path.join(self.get_temp_dir(), "half")
        full = os.path.join(self.get_temp_dir(), "full")
        model.save_to_preset(half, weights_dtype="float16")
        model.save_to_preset(full)
        size = os.path.getsize
        self.assertLess(
            size(os.path.join(half, "model.weights.h5")),
            0.6 * size(os.path.join(full, "model.weights.h5")),
        )
        loaded = models.EfficientCapsNet.from_preset(half)
        for saved, restored, variable in zip(
            _values(model), _values(loaded), loaded.weights
        ):
            self.assertEqual(variable.dtype, saved.dtype)
            np.testing.assert_array_equal(
                restored, saved.astype("float16").astype(saved.dtype)
            )

    def test_overrides_and_no_weights(self):
        model = models.CapsNet(**CAPSNET_CONFIG)
        directory = self.get_temp_dir()
        model.save_to_preset(directory)
        fresh = models.CapsNet.from_preset(
            directory, load_weights=False, name="fresh"
        )
        self.assertEqual(fresh.name, "fresh")
        self.assertFalse(
            all(
                np.array_equal(a, b)
                for a, b in zip(_values(model), _values(fresh))
            )
        )

    def test_errors(self):
        model = models.CapsNet(**CAPSNET_CONFIG)
        directory = self.get_temp_dir()
        with self.assertRaisesRegex(
            TypeError, "metadata must be a dict.*Received: metadata=3"
        ):
            model.save_to_preset(directory, metadata=3)
        with self.assertRaisesRegex(
            TypeError, "JSON values.*Received: metadata="
        ):
            model.save_to_preset(directory, metadata={"x": object()})
        with self.assertRaisesRegex(
            ValueError, "weights_dtype must be.*Received: weights_dtype=int8"
        ):
            model.save_to_preset(directory, weights_dtype="int8")
        with self.assertRaisesRegex(
            TypeError, "preset_dir must be a path.*Received: preset_dir=1"
        ):
            model.save_to_preset(1)
        self.assertEqual(os.listdir(directory), [])
        model.save_to_preset(directory)
        with self.assertRaisesRegex(
            ValueError, "class CapsNet, not MatrixCapsNet.*Received"
        ):
            models.MatrixCapsNet.from_preset(directory)
        with self.assertRaisesRegex(
            TypeError, "load_weights must be a bool.*Received: load_weights=1"
        ):
            models.CapsNet.from_preset(directory, load_weights=1)
        os.remove(os.path.join(directory, "model.weights.h5"))
        with self.assertRaisesRegex(FileNotFoundError, "load_weights=False"):
            models.CapsNet.from_preset(directory)
        with self.assertRaisesRegex(
            ValueError, "preset must be.*Received: preset=/no/such/dir"
        ):
            models.MatrixCapsNet.from_preset("/no/such/dir")


@pytest.mark.primary_backend
class PresetFileErrorsTest(TestCase):
    """A damaged or foreign file of a preset directory raises an error
    that names the file and the fix."""

    def _preset(self, cls=models.CapsNet, config=CAPSNET_CONFIG):
        directory = os.path.join(self.get_temp_dir(), "preset")
        cls(**config).save_to_preset(directory)
        return directory

    def _assert_weights_error(self, directory, pattern, cause=None):
        path = os.path.join(directory, "model.weights.h5")
        received = re.escape(f"Received: preset={directory!r}")
        for load in (models.CapsNet.from_preset, models.from_preset):
            with self.assertRaisesRegex(
                ValueError,
                f"(?s){re.escape(path)} .*{pattern}.*save_to_preset.*"
                f"load_weights=False.*{received}",
            ) as raised:
                load(directory)
            if cause is not None:
                self.assertIsInstance(raised.exception.__cause__, cause)
        # The network alone still builds.
        models.CapsNet.from_preset(directory, load_weights=False)

    def test_truncated_weights(self):
        directory = self._preset()
        path = os.path.join(directory, "model.weights.h5")
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
        self._assert_weights_error(
            directory, "not a readable HDF5 file.*truncated", OSError
        )

    def test_weights_overwritten_with_text(self):
        directory = self._preset()
        with open(os.path.join(directory, "model.weights.h5"), "w") as f:
            f.write("not weights\n")
        self._assert_weights_error(
            directory, "not a readable HDF5 file.*overwritten", OSError
        )

    @parameterized.named_parameters(
        ("another_architecture", models.EfficientCapsNet, EFFICIENT_CONFIG),
        (
            "another_size",
            models.CapsNet,
            {**CAPSNET_CONFIG, "num_classes": 3},
        ),
        # More weights than the network has: Keras loads the ones it
        # finds without a word.
        (
            "a_superset",
            models.CapsNet,
            {**CAPSNET_CONFIG, "decoder_units": (16, 8)},
        ),
    )
    def test_weights_of_another_network(self, cls, config):
        directory = self._preset()
        other = self._preset(cls, config)
        os.replace(
            os.path.join(other, "model.weights.h5"),
            os.path.join(directory, "model.weights.h5"),
        )
        self._assert_weights_error(
            directory, "does not fit the network.*another model"
        )

    def test_weights_of_the_same_shapes_under_other_names(self):
        directory = self._preset()
        with h5py.File(os.path.join(directory, "model.weights.h5"), "a") as f:
            f.move("decoder/layers/dense", "decoder/layers/other")
        self._assert_weights_error(directory, "does not load", ValueError)

    def test_missing_weights(self):
        directory = self._preset()
        path = os.path.join(directory, "model.weights.h5")
        os.remove(path)
        with self.assertRaisesRegex(
            FileNotFoundError,
            f"{re.escape(path)}.*save_to_preset.*load_weights=False",
        ):
            models.CapsNet.from_preset(directory)

    @parameterized.named_parameters(
        ("truncated", '{"class_name": "CapsNet", "con', "not valid JSON"),
        ("not_utf8", b"\xff\xfe{}", "not valid JSON"),
        ("an_array", "[1, 2]", "holds an array, not the JSON object"),
        ("no_model", '{"name": "x"}', "not a serialized model.*'name'"),
    )
    def test_damaged_config(self, content, pattern):
        directory = self._preset()
        path = os.path.join(directory, "config.json")
        with open(path, "wb") as f:
            f.write(content if isinstance(content, bytes) else content.encode())
        received = re.escape(f"Received: preset={directory!r}")
        message = (
            f"(?s){re.escape(path)} .*{pattern}.*save_to_preset.*{received}"
        )
        for load in (models.CapsNet.from_preset, models.from_preset):
            with self.assertRaisesRegex(ValueError, message) as raised:
                load(directory, load_weights=False)
            if pattern == "not valid JSON":
                self.assertIsInstance(
                    raised.exception.__cause__,
                    (json.JSONDecodeError, UnicodeDecodeError),
                )

    def test_damaged_metadata(self):
        directory = self._preset()
        path = os.path.join(directory, "metadata.json")
        with open(path, "w") as f:
            f.write('{"dataset": "no')
        with self.assertRaisesRegex(
            ValueError,
            f"{re.escape(path)} is not valid JSON.*truncated.*save_to_preset",
        ) as raised:
            _presets.read_metadata(directory)
        self.assertIsInstance(raised.exception.__cause__, json.JSONDecodeError)
        with open(path, "w") as f:
            f.write('"a string"')
        with self.assertRaisesRegex(ValueError, "holds a string, not"):
            _presets.read_metadata(directory)
        os.remove(path)
        with self.assertRaisesRegex(
            FileNotFoundError, f"no metadata.json.*{re.escape(path)}"
        ):
            _presets.read_metadata(directory)

    def test_a_shipped_preset_is_repaired_by_reinstalling(self):
        directory = os.path.join(_presets.BUILT_IN_DIR, "capsnet_mnist")
        self.assertIn(
            "pip install --force-reinstall keras-capsules",
            _presets.repair_advice(directory),
        )
        self.assertIn(
            "save_to_preset", _presets.repair_advice(self.get_temp_dir())
        )


@pytest.mark.primary_backend
class NewClassesTest(TestCase):
    """`from_preset(..., num_classes=N)`: the trained layers that fit,
    new ones for the rest."""

    @parameterized.named_parameters(
        *[(name, name) for name in _KEPT_FOR_NEW_CLASSES]
    )
    def test_a_shipped_preset_with_new_classes(self, name):
        model = models.from_preset(name, num_classes=5)
        preset = models.from_preset(name)
        self.assertIsInstance(model, type(preset))
        self.assertEqual(model.output_shape, (None, 5))
        kept, kept_in_decoder = _KEPT_FOR_NEW_CLASSES[name]
        self.assertEqual(_equal_layers(model, preset), kept + kept_in_decoder)
        self.assertEqual(
            sorted(_layers(model)),
            sorted(kept + kept_in_decoder + _NEW_FOR_NEW_CLASSES[name]),
        )
        x = _images({"image_shape": tuple(model.image_shape)}, batch=1)
        self.assertEqual(tuple(model(x).shape), (1, 5))

    def test_new_classes_and_image_shape_from_a_directory(self):
        model = models.CapsNet(**CAPSNET_CONFIG)
        directory = self.get_temp_dir()
        model.save_to_preset(directory)
        fewer = models.CapsNet.from_preset(directory, num_classes=2)
        self.assertEqual(fewer.output_shape, (None, 2))
        self.assertEqual(
            _equal_layers(fewer, model),
            ["conv1", "primary_caps", "decoder/decoder_output"],
        )
        larger = models.CapsNet.from_preset(directory, image_shape=(24, 24, 3))
        self.assertEqual(
            _equal_layers(larger, model),
            ["conv1", "primary_caps", "decoder/decoder_dense_0"],
        )
        x = _images({"image_shape": (24, 24, 3)}, batch=1)
        self.assertEqual(tuple(larger(x).shape), (1, 4))

    def test_overrides_that_keep_the_shapes_load_every_weight(self):
        model = models.MatrixCapsNet(**MATRIX_CONFIG)
        directory = self.get_temp_dir()
        model.save_to_preset(directory)
        renamed = models.MatrixCapsNet.from_preset(
            directory, name="renamed", routing_iterations=2
        )
        self.assertEqual(renamed.name, "renamed")
        for saved, restored in zip(_values(model), _values(renamed)):
            np.testing.assert_array_equal(saved, restored)


@pytest.mark.primary_backend
class PresetListingTest(TestCase):
    @parameterized.named_parameters(
        *[(cls.__name__, cls) for cls in _ARCHITECTURES]
    )
    def test_presets_list_every_name_from_preset_accepts(self, cls):
        presets = cls.presets
        self.assertEqual(
            set(presets), set(_ARCHITECTURES[cls]) | set(_TRAINED[cls])
        )
        for name, entry in presets.items():
            self.assertEqual(entry["class_name"], cls.__name__, name)
            self.assertIsInstance(entry["trained"], bool, name)
            self.assertEqual(entry["trained"], name in _TRAINED[cls], name)
            self.assertIsInstance(entry["description"], str, name)
            if not entry["trained"]:
                self.assertIsInstance(entry["config"], dict, name)
        # Read-only.
        with self.assertRaises(TypeError):
            presets["new"] = {}
        with self.assertRaises(TypeError):
            presets[next(iter(presets))]["trained"] = True

    @parameterized.named_parameters(
        *[
            (name, cls, name)
            for cls, names in _ARCHITECTURES.items()
            for name in names
        ]
    )
    def test_from_preset_builds_every_architecture(self, cls, name):
        entry = cls.presets[name]
        model = cls.from_preset(name)
        self.assertIsInstance(model, cls)
        config = model.get_config()
        for key, value in entry["config"].items():
            self.assertEqual(config[key], value, key)
        # Equal to the constructor with the listed arguments.
        self.assertEqual(
            cls(**entry["config"], name=config["name"]).get_config(), config
        )

    @parameterized.named_parameters(
        *[
            (name, cls, name)
            for cls, names in _TRAINED.items()
            for name in names
        ]
    )
    def test_from_preset_builds_every_trained_network(self, cls, name):
        entry = cls.presets[name]
        model = cls.from_preset(name, load_weights=False)
        self.assertIsInstance(model, cls)
        self.assertEqual(model.count_params(), entry["parameters"])
        self.assertEqual(list(model.image_shape), entry["image_shape"])

    def test_list_presets_is_the_trained_entries_of_the_classes(self):
        trained = {}
        for cls in _ARCHITECTURES:
            entries = {
                name: dict(entry)
                for name, entry in cls.presets.items()
                if entry["trained"]
            }
            self.assertEqual(models.list_presets(cls), entries)
            self.assertEqual(models.list_presets(cls.__name__), entries)
            trained.update(entries)
        listing = models.list_presets()
        self.assertEqual(listing, trained)
        for name, metadata in listing.items():
            self.assertIs(metadata["trained"], True, name)


class ShippedPresetsTest(TestCase):
    @pytest.mark.primary_backend
    def test_list_presets(self):
        listing = models.list_presets()
        self.assertIn("efficient_capsnet_mnist", listing)
        for name, metadata in listing.items():
            missing = [f for f in _TRAINED_FIELDS if f not in metadata]
            self.assertEqual(missing, [], name)
            cls = getattr(models, metadata["class_name"])
            self.assertIn(name, models.list_presets(cls))
            self.assertIn(name, models.list_presets(cls.__name__))
        self.assertEqual(
            list(models.list_presets("EfficientCapsNet")),
            [
                name
                for name, metadata in listing.items()
                if metadata["class_name"] == "EfficientCapsNet"
            ],
        )
        with self.assertRaisesRegex(
            TypeError, "model class, its name or None.*Received: model=1"
        ):
            models.list_presets(1)

    @pytest.mark.primary_backend
    def test_shipped_metadata_tells_how_to_use_and_retrain(self):
        for name, metadata in models.list_presets().items():
            self.assertEqual(len(metadata["image_shape"]), 3, name)
            self.assertEqual(metadata["pixel_range"], [0.0, 1.0], name)
            self.assertRegex(
                metadata["command"],
                r"^KERAS_BACKEND=(tensorflow|jax|torch) .*python \S+\.py "
                r"--data-dir path/to/mnist( |$)",
                name,
            )
            self.assertTrue(metadata["description"], name)

    @pytest.mark.primary_backend
    def test_a_shipped_preset_is_named_by_its_class(self):
        name = "efficient_capsnet_mnist"
        network = models.EfficientCapsNet.from_preset(name, load_weights=False)
        model = models.EfficientCapsNet.from_preset(name)
        self.assertEqual(network.count_params(), model.count_params())
        with self.assertRaisesRegex(ValueError, "efficient_capsnet_mnist"):
            models.EfficientCapsNet.from_preset("no_such_preset")
        with self.assertRaisesRegex(
            ValueError, "class EfficientCapsNet, not CapsNet"
        ):
            models.CapsNet.from_preset(name)
        with self.assertRaisesRegex(
            ValueError, "shipped preset.*Received: preset='small'"
        ):
            models.from_preset("small")

    @parameterized.named_parameters(
        *[(name, name) for name in models.list_presets()]
    )
    def test_shipped_preset_scores_on_this_backend(self, name):
        metadata = models.list_presets()[name]
        model = getattr(models, metadata["class_name"]).from_preset(name)
        x, y = mnist.load_sample("test")
        accuracy, predictions = _ship_preset().evaluate(model, x, y)
        self.assertGreaterEqual(
            accuracy, metadata["sample_test_accuracy"] - _SAMPLE_MARGIN
        )
        with np.load(_PREDICTIONS) as references:
            expected = references[name]
        scale = max(1.0, float(np.abs(expected).max()))
        self.assertAllClose(
            predictions[: len(expected)],
            expected,
            atol=_PREDICTION_ATOL * scale,
        )
