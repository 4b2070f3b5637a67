"""What the models share: one `compile` and `default_optimizer` signature,
`total_steps` checked alike, an optimizer that `compile` builds on
TensorFlow, and Keras's own `fit`, `train_on_batch`, `evaluate` and
`predict` everywhere in the package."""

import importlib
import inspect
import os
import pkgutil

import keras
import numpy as np
import pytest
from absl.testing import parameterized

import keras_capsules
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests.layers import scae_cases
from tests.models.presets_test import MODELS as _MODELS

# Signatures, argument checks and saved schedules, the same code on every
# backend; each model's fit, save and load run on every backend in its own
# tests.
pytestmark = backend_marks.RUN_ONCE

_KERAS_METHODS = ("fit", "train_on_batch", "evaluate", "predict")
# The subpackages whose modules hold classes; `datasets` and
# `visualization` hold functions and need optional extras.
_SUBPACKAGES = ("callbacks", "layers", "losses", "metrics", "models", "ops")


def _package_classes():
    """Every class defined in a module of the subpackages above, public
    or not, with every base class defined in `keras_capsules`."""
    classes = set()
    for subpackage in _SUBPACKAGES:
        package = importlib.import_module(f"keras_capsules.{subpackage}")
        modules = [package] + [
            importlib.import_module(info.name)
            for info in pkgutil.walk_packages(
                package.__path__, prefix=f"{package.__name__}."
            )
        ]
        for module in modules:
            for _, value in vars(module).items():
                if inspect.isclass(value):
                    classes.update(value.__mro__)
    return {
        cls
        for cls in classes
        if cls.__module__.split(".")[0] == keras_capsules.__name__
    }


class KerasMethodsTest(TestCase):
    def test_no_class_overrides_the_keras_methods(self):
        classes = _package_classes()
        # The walk found the models and their private bases.
        names = {cls.__name__ for cls in classes}
        for expected in (
            "CapsNet",
            "EfficientCapsNet",
            "MatrixCapsNet",
            "CapsuleModel",
            "CapsuleClassifier",
            "DenseCaps",
            "EMClassCaps",
            "SpreadMarginScheduler",
        ):
            self.assertIn(expected, names)
        overridden = sorted(
            f"{cls.__module__}.{cls.__qualname__}.{method}"
            for cls in classes
            for method in _KERAS_METHODS
            if method in vars(cls)
        )
        self.assertEqual(overridden, [])


class CompileTest(TestCase):
    def test_one_signature_for_the_three_models(self):
        compile_signatures = {
            cls.__name__: inspect.signature(cls.compile)
            for _, cls, _ in _MODELS
        }
        optimizer_signatures = {
            cls.__name__: inspect.signature(cls.default_optimizer)
            for _, cls, _ in _MODELS
        }
        for signatures in (compile_signatures, optimizer_signatures):
            self.assertLen(set(signatures.values()), 1, signatures)
        signature = compile_signatures["CapsNet"]
        self.assertEqual(
            list(signature.parameters),
            [
                "self",
                "optimizer",
                "loss",
                "metrics",
                "jit_compile",
                "total_steps",
                "kwargs",
            ],
        )
        parameters = signature.parameters
        self.assertEqual(parameters["optimizer"].default, "auto")
        self.assertEqual(parameters["loss"].default, "auto")
        for name in ("metrics", "jit_compile", "total_steps"):
            self.assertEqual(
                parameters[name].kind, inspect.Parameter.KEYWORD_ONLY, name
            )
        self.assertIsNone(parameters["total_steps"].default)
        self.assertEqual(
            list(optimizer_signatures["CapsNet"].parameters),
            ["self", "total_steps"],
        )
        self.assertIsNone(
            optimizer_signatures["CapsNet"].parameters["total_steps"].default
        )

    @parameterized.named_parameters(*_MODELS)
    def test_total_steps(self, cls, config):
        model = cls(**config)
        model.compile(total_steps=10)
        self.assertIsInstance(model.optimizer, keras.optimizers.Adam)
        for total_steps in (0, -5, 2.5, True, "10"):
            with self.assertRaisesRegex(
                ValueError,
                r"total_steps must be None or an integer >= 1\. "
                rf"Received: total_steps={total_steps}$",
            ):
                model.compile(total_steps=total_steps)
        with self.assertRaisesRegex(
            ValueError,
            r"optimizer=\"auto\".*Received: optimizer=.*, total_steps=5$",
        ):
            model.compile(optimizer="adam", total_steps=5)
        with self.assertRaisesRegex(
            ValueError, r"Received: optimizer=SGD, total_steps=5$"
        ):
            model.compile(optimizer=keras.optimizers.SGD(), total_steps=5)
        # `total_steps` sizes the default optimizer only: an optimizer
        # passed in without it is kept.
        optimizer = keras.optimizers.SGD()
        model.compile(optimizer=optimizer)
        self.assertIs(model.optimizer, optimizer)

    # MatrixCapsNet's, with its learning rate, is in matrix_capsnet_test.py.
    @parameterized.named_parameters(*_MODELS[:2])
    def test_train_on_batch_after_compile(self, cls, config):
        model = cls(**config)
        model.compile()
        rng = np.random.default_rng(0)
        x = rng.uniform(size=(2,) + config["image_shape"]).astype("float32")
        y = np.eye(config["num_classes"], dtype="float32")[[0, 1]]
        logs = model.train_on_batch(x, y, return_dict=True)
        self.assertTrue(np.isfinite(logs["loss"]))
        self.assertEqual(int(model.optimizer.iterations), 1)

    @parameterized.named_parameters(*_MODELS)
    def test_saved_model_keeps_the_schedule_of_total_steps(self, cls, config):
        model = cls(**config)
        model.compile(total_steps=30)
        path = os.path.join(self.get_temp_dir(), "model.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
        self.assertIsInstance(loaded, cls)
        self.assertEqual(
            loaded.optimizer.get_config()["learning_rate"],
            model.optimizer.get_config()["learning_rate"],
        )


# Keras builds the optimizer inside the first trace of the train step
# unless `compile` did, and TensorFlow traces a function that creates
# variables a second time; JAX and PyTorch keep Keras' order.
@pytest.mark.backends("tensorflow")
class OptimizerBuiltByCompileTest(TestCase):
    @parameterized.named_parameters(
        *_MODELS,
        (
            "stacked_capsule_autoencoder",
            keras_capsules.models.StackedCapsuleAutoencoder,
            scae_cases.SMALL_MODEL,
        ),
    )
    def test_compile_creates_the_optimizer_variables(self, cls, config):
        model = cls(**config)
        model.compile()
        optimizer = model.optimizer
        self.assertTrue(optimizer.built)
        # Two slots for each trainable variable (Adam's moments, RMSprop's
        # velocity and momentum).
        count = len(optimizer.variables)
        self.assertGreaterEqual(count, 2 * len(model.trainable_variables))
        # An optimizer built for the model is kept as it is.
        model.compile(optimizer=optimizer)
        self.assertIs(model.optimizer, optimizer)
        self.assertLen(optimizer.variables, count)

    def test_fit_traces_the_train_step_once(self):
        _, cls, config = _MODELS[0]
        model = cls(**config)
        model.compile()
        count = len(model.optimizer.variables)
        traces = []
        train_step = model.train_step

        def counted(data):
            traces.append(1)
            return train_step(data)

        model.train_step = counted
        rng = np.random.default_rng(0)
        x = rng.uniform(size=(4,) + config["image_shape"]).astype("float32")
        y = np.eye(config["num_classes"], dtype="float32")[[0, 1, 2, 3]]
        model.fit(x, y, batch_size=2, epochs=2, verbose=0)
        self.assertLen(traces, 1)
        self.assertEqual(int(model.optimizer.iterations), 4)
        self.assertLen(model.optimizer.variables, count)


class ImageShapeTest(TestCase):
    @parameterized.named_parameters(
        (name, cls, config) for name, cls, config in _MODELS
    )
    def test_input_shape_is_refused(self, cls, config):
        # `keras.Model` would take it silently and build the default shape.
        config = {k: v for k, v in config.items() if k != "image_shape"}
        with self.assertRaisesRegex(
            TypeError,
            r"image_shape, not input_shape\. "
            r"Received: input_shape=\(40, 40, 1\)$",
        ):
            cls(input_shape=(40, 40, 1), **config)
