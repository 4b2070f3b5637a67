"""The images the three models take (`keras_capsules/models/_images.py`):
`uint8` pixel values rescaled as the floats they stand for, other integer
dtypes refused, the image shape checked on every call, and NaN scores for
an image with a non-finite pixel, eager and compiled."""

import keras
import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules.testing import TestCase
from tests.models.presets_test import MODELS as _MODELS

# One NaN pixel, an all-NaN image, +inf and -inf, then two finite images.
_NON_FINITE = ("nan_pixel", "all_nan", "plus_inf", "minus_inf")


def _images(config, batch=4, seed=0):
    """`uint8` images and the `[0, 1]` floats they stand for."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(batch,) + config["image_shape"])
    pixels = pixels.astype("uint8")
    return pixels, pixels.astype("float32") / np.float32(255.0)


def _with_non_finite(x):
    bad = np.repeat(x[:1], len(_NON_FINITE), axis=0)
    bad[0, 2, 3, 0] = np.nan
    bad[1] = np.nan
    bad[2, 1, 1, 0] = np.inf
    bad[3, 4, 2, -1] = -np.inf
    return np.concatenate([bad, x[:2]])


def _numpy(x):
    return keras.tree.map_structure(keras.ops.convert_to_numpy, x)


class Uint8ImagesTest(TestCase):
    @parameterized.named_parameters(*_MODELS)
    # `_images.py` rescales for the three models alike: one of them on
    # every backend.
    @pytest.mark.primary_backend(every_backend=("capsnet",))
    def test_uint8_images_give_what_their_floats_give(self, cls, config):
        model = cls(**config)
        pixels, floats = _images(config)
        self.assertAllClose(
            model.predict(pixels, verbose=0),
            model.predict(floats, verbose=0),
            atol=1e-6,
        )
        self.assertAllClose(model(pixels), model(floats), atol=1e-6)
        self.assertAllClose(
            model.class_capsules(pixels), model.class_capsules(floats)
        )

    # The models with a decoder, whose reconstruction targets are the
    # images themselves; MatrixCapsNet's loss sees only its scores.
    @parameterized.named_parameters(*_MODELS[:2])
    @pytest.mark.primary_backend
    def test_fit_and_evaluate_take_uint8_images(self, cls, config):
        model = cls(**config)
        model.compile()
        pixels, floats = _images(config)
        y = np.eye(config["num_classes"], dtype="float32")[[0, 1, 0, 1]]
        self.assertAllClose(
            model.evaluate(pixels, y, verbose=0),
            model.evaluate(floats, y, verbose=0),
            atol=1e-5,
        )
        logs = model.train_on_batch(pixels, y, return_dict=True)
        self.assertTrue(np.isfinite(logs["loss"]))

    @parameterized.named_parameters(*_MODELS)
    @pytest.mark.primary_backend
    def test_other_integer_dtypes_are_refused(self, cls, config):
        pixels, _ = _images(config, batch=2)
        for dtype in ("int32", "int64", "uint16", "bool"):
            # A fresh model each time: on JAX, Keras leaves a model whose
            # `predict` raised without its variables.
            model = cls(**config)
            with self.assertRaisesRegex(
                TypeError,
                r"float images .* \[0, 1\] or uint8 .*"
                r"Received: x\.dtype=(u?int\d+|bool)\b",
            ):
                model.predict(pixels.astype(dtype), verbose=0)


@pytest.mark.backends("tensorflow", "torch")
class NonFiniteImagesTest(TestCase):
    @parameterized.named_parameters(*_MODELS)
    def test_a_non_finite_image_gets_nan_scores_only(self, cls, config):
        model = cls(**config)
        _, floats = _images(config)
        x = _with_non_finite(floats)
        for name, scores in (
            ("predict", model.predict(x, verbose=0)),
            ("call", _numpy(model(x))),
        ):
            for row, case in enumerate(_NON_FINITE):
                self.assertTrue(np.isnan(scores[row]).all(), (name, case))
            self.assertAllFinite(scores[len(_NON_FINITE) :], msg=name)
        for output in keras.tree.flatten(_numpy(model.class_capsules(x))):
            self.assertTrue(np.isnan(output[: len(_NON_FINITE)]).all())
            self.assertAllFinite(output[len(_NON_FINITE) :])

    @parameterized.named_parameters(*_MODELS)
    def test_a_non_finite_image_gives_a_nan_loss(self, cls, config):
        model = cls(**config)
        model.compile()
        _, floats = _images(config)
        x = _with_non_finite(floats)[1:2]
        y = np.eye(config["num_classes"], dtype="float32")[[0]]
        self.assertTrue(np.isnan(model.evaluate(x, y, verbose=0)[0]))


class ImageShapeTest(TestCase):
    @parameterized.named_parameters(*_MODELS)
    @pytest.mark.primary_backend
    def test_wrong_shapes_raise_first_and_after_a_valid_call(self, cls, config):
        model = cls(**config)
        height, width, channels = config["image_shape"]
        wrong = [
            (2, height + 4, width + 4, channels),
            (2, height, width, channels + 2),
            (2, 1, height, width, channels),
        ]
        pattern = (
            rf"takes images of shape \(batch_size, {height}, {width}, "
            rf"{channels}\).*Received: x\.shape="
        )
        _, floats = _images(config, batch=2)
        for after_a_valid_call in (False, True):
            if after_a_valid_call:
                model.predict(floats, verbose=0)
            for shape in wrong:
                images = np.zeros(shape, "float32")
                with self.assertRaisesRegex(ValueError, pattern):
                    model(images)
                with self.assertRaisesRegex(ValueError, pattern):
                    model.class_capsules(images)
                with self.assertRaisesRegex(ValueError, pattern):
                    model.predict(images, verbose=0)
                if keras.backend.backend() == "jax":
                    # Keras leaves a JAX model whose `predict` raised
                    # without its variables.
                    model = cls(**config)
                    if after_a_valid_call:
                        model.predict(floats, verbose=0)

    @pytest.mark.primary_backend
    def test_one_channel_images_need_their_channel_axis(self):
        name, cls, config = _MODELS[2]
        self.assertEqual(config["image_shape"][-1], 1, name)
        _, floats = _images(config, batch=2)
        with self.assertRaisesRegex(
            ValueError,
            r"Add the channel axis: x\[\.\.\., None\]\. "
            r"Received: x\.shape=\(2, 24, 24\)",
        ):
            cls(**config).predict(floats[..., 0], verbose=0)
        model = cls(**config)
        model.predict(floats, verbose=0)
        # TensorFlow traces this call with an unknown rank.
        with self.assertRaisesRegex(
            ValueError, r"takes images of shape \(batch_size, 24, 24, 1\)"
        ):
            model.predict(floats[..., 0], verbose=0)
