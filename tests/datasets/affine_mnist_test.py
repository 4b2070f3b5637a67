"""Tests of `datasets.affine_mnist`, pure NumPy.

The classes derive from absl's `parameterized.TestCase` rather than
`keras_capsules.testing.TestCase`: nothing here touches Keras, and the Keras
session reset that the latter runs before every test would cost more than
all of these tests together.
"""

import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules.datasets import affine_mnist
from keras_capsules.datasets import mnist
from tests import non_finite
from tests import references

# Data pipelines in NumPy and tf.data: no Keras backend involved.
pytestmark = pytest.mark.primary_backend

# The first 1000 training images of the embedded sample, (N, 28, 28).
_DIGITS = mnist.load_sample("train")[0][:1000, ..., 0]
_DIGITS_UINT8 = np.rint(_DIGITS * 255).astype("uint8")
# In the order of the reference's arguments.
_PARAMETER_NAMES = (
    "rotation",
    "shear",
    "scale_x",
    "scale_y",
    "shift_x",
    "shift_y",
)


def _ink_box(image):
    """`(top, left, bottom, right)` of the non-zero pixels, inclusive."""
    rows = np.flatnonzero(image.any(axis=1))
    cols = np.flatnonzero(image.any(axis=0))
    return rows[0], cols[0], rows[-1], cols[-1]


def _border(images):
    return np.concatenate(
        [
            images[:, 0].ravel(),
            images[:, -1].ravel(),
            images[:, :, 0].ravel(),
            images[:, :, -1].ravel(),
        ]
    )


def _asymmetric(shape, seed=0):
    return np.random.default_rng(seed).random(shape)


class LayoutTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("translate", lambda x: affine_mnist.translate(x, seed=1), (40, 40)),
        ("transform", lambda x: affine_mnist.transform(x, seed=1), (40, 40)),
        (
            "transform_small_canvas",
            lambda x: affine_mnist.transform(x, seed=1, canvas_size=32),
            (32, 32),
        ),
        ("rotate", lambda x: affine_mnist.rotate(x, 25.0), (28, 28)),
    )
    def test_shapes_and_dtypes(self, function, size):
        for dtype in ("uint8", "float16", "float32", "float64"):
            x = _DIGITS[:4].astype(dtype)
            if dtype == "uint8":
                x = _DIGITS_UINT8[:4]
            for images, shape in (
                (x, (4,) + size),
                (x[..., None], (4,) + size + (1,)),
            ):
                output = function(images)
                self.assertEqual(output.shape, shape)
                self.assertEqual(output.dtype, np.dtype(dtype))

    def test_uint8_results_are_rounded(self):
        from_uint8 = affine_mnist.transform(_DIGITS_UINT8[:8], seed=3)
        from_float = affine_mnist.transform(
            _DIGITS_UINT8[:8].astype("float32"), seed=3
        )
        np.testing.assert_array_equal(
            from_uint8, np.clip(np.rint(from_float), 0, 255).astype("uint8")
        )

    def test_empty_batch(self):
        empty = np.zeros((0, 28, 28), "float32")
        self.assertEqual(affine_mnist.translate(empty).shape, (0, 40, 40))
        self.assertEqual(affine_mnist.transform(empty).shape, (0, 40, 40))
        self.assertEqual(affine_mnist.rotate(empty, 10).shape, (0, 28, 28))


class DeterminismTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("translate", affine_mnist.translate),
        ("transform", affine_mnist.transform),
    )
    def test_same_seed_same_result(self, function):
        x = _DIGITS[:16]
        np.testing.assert_array_equal(function(x, seed=7), function(x, seed=7))
        self.assertFalse(
            np.array_equal(function(x, seed=7), function(x, seed=8))
        )

    @parameterized.named_parameters(
        ("translate", affine_mnist.translate),
        ("transform", affine_mnist.transform),
    )
    def test_later_images_change_nothing_before_them(self, function):
        x = _DIGITS[:8]
        first = function(x, seed=2)
        again = function(np.concatenate([x, x[::-1]]), seed=2)[:8]
        np.testing.assert_array_equal(first, again)


class TranslateTest(parameterized.TestCase):
    def test_every_digit_is_copied_whole(self):
        output = affine_mnist.translate(_DIGITS, seed=0)
        np.testing.assert_allclose(
            output.sum(axis=(1, 2)), _DIGITS.sum(axis=(1, 2)), rtol=1e-6
        )
        offsets = []
        for image, placed in zip(_DIGITS, output):
            top, left, _, _ = _ink_box(image)
            placed_top, placed_left, _, _ = _ink_box(placed)
            row, col = placed_top - top, placed_left - left
            offsets.append((row, col))
            np.testing.assert_array_equal(
                placed[row : row + 28, col : col + 28], image
            )
        # Uniform integer offsets 0..12: shifts of up to 6 pixels either way.
        offsets = np.array(offsets)
        self.assertEqual(set(offsets[:, 0]), set(range(13)))
        self.assertEqual(set(offsets[:, 1]), set(range(13)))

    def test_canvas_of_the_image_size_is_identity(self):
        output = affine_mnist.translate(_DIGITS_UINT8[:5], canvas_size=28)
        np.testing.assert_array_equal(output, _DIGITS_UINT8[:5])


class TransformTest(parameterized.TestCase):
    def test_parameters_respect_the_affnist_ranges(self):
        output, parameters = affine_mnist.transform(
            _DIGITS, seed=0, return_parameters=True
        )
        self.assertEqual(sorted(parameters), sorted(_PARAMETER_NAMES))
        for values in parameters.values():
            self.assertEqual(values.shape, (len(_DIGITS),))
        rotation = parameters["rotation"]
        self.assertLessEqual(np.abs(rotation).max(), 20.0)
        self.assertGreater(rotation.max(), 19.0)
        self.assertLess(rotation.min(), -19.0)
        self.assertLessEqual(np.abs(parameters["shear"]).max(), 0.2)
        self.assertGreater(np.abs(parameters["shear"]).max(), 0.19)
        for name in ("scale_x", "scale_y"):
            self.assertGreaterEqual(parameters[name].min(), 0.8)
            self.assertLessEqual(parameters[name].max(), 1.2)
        # The two scales are drawn independently.
        self.assertLess(
            abs(
                np.corrcoef(parameters["scale_x"], parameters["scale_y"])[0, 1]
            ),
            0.1,
        )
        # Translations reach well beyond the 6 pixels of the training set.
        self.assertGreater(np.abs(parameters["shift_x"]).max(), 8.0)
        self.assertGreater(np.abs(parameters["shift_y"]).max(), 8.0)
        # No ink reaches the outermost pixels: nothing was cut off.
        self.assertLess(_border(output).max(), 1e-5)
        # Bilinear sampling keeps the ink's mass, times the area change.
        ratio = output.sum(axis=(1, 2)) / (
            _DIGITS.sum(axis=(1, 2))
            * parameters["scale_x"]
            * parameters["scale_y"]
        )
        np.testing.assert_allclose(ratio, 1.0, atol=0.1)

    def test_custom_ranges(self):
        _, parameters = affine_mnist.transform(
            _DIGITS[:50],
            seed=0,
            max_rotation=0,
            max_shear=0.0,
            scale_range=(1.5, 1.5),
            return_parameters=True,
        )
        np.testing.assert_array_equal(parameters["rotation"], 0.0)
        np.testing.assert_array_equal(parameters["shear"], 0.0)
        np.testing.assert_array_equal(parameters["scale_x"], 1.5)
        np.testing.assert_array_equal(parameters["scale_y"], 1.5)

    def test_positive_shear_slants_to_the_right(self):
        bar = np.zeros((20, 28, 28), "float64")
        bar[:, 4:24, 13:15] = 1.0
        output, parameters = affine_mnist.transform(
            bar,
            seed=0,
            max_rotation=0.0,
            max_shear=0.4,
            scale_range=(1.0, 1.0),
            return_parameters=True,
        )
        cols = np.arange(40)
        for image, shear in zip(output, parameters["shear"]):
            top = image[:20].sum(axis=0) @ cols / image[:20].sum()
            bottom = image[20:].sum(axis=0) @ cols / image[20:].sum()
            self.assertEqual(np.sign(top - bottom), np.sign(shear))

    def test_matches_the_per_pixel_reference(self):
        images = _asymmetric((2, 6, 7))
        output, parameters = affine_mnist.transform(
            images, seed=5, canvas_size=11, return_parameters=True
        )
        for i in range(2):
            expected = references.affine_warp(
                images[i],
                *(parameters[name][i] for name in _PARAMETER_NAMES),
                out_shape=(11, 11),
            )
            np.testing.assert_allclose(output[i], expected, atol=1e-12)

    def test_digit_too_large_for_the_canvas_is_centred(self):
        _, parameters = affine_mnist.transform(
            np.ones((4, 28, 28), "float32"),
            canvas_size=20,
            return_parameters=True,
        )
        np.testing.assert_allclose(parameters["shift_x"], 0.0, atol=1e-9)
        np.testing.assert_allclose(parameters["shift_y"], 0.0, atol=1e-9)


class RotateTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("odd_size", 7),
        ("even_size", 8),
    )
    def test_quarter_turns_match_rot90(self, size):
        images = _asymmetric((1, size, size))
        for angle, turns in ((90, 1), (180, 2), (270, 3), (-90, -1)):
            np.testing.assert_allclose(
                affine_mnist.rotate(images, angle),
                np.rot90(images, turns, axes=(1, 2)),
                atol=1e-12,
            )

    def test_zero_and_full_turns_are_identity(self):
        np.testing.assert_array_equal(
            affine_mnist.rotate(_DIGITS_UINT8[:10], 0), _DIGITS_UINT8[:10]
        )
        np.testing.assert_array_equal(
            affine_mnist.rotate(_DIGITS[:10], 0.0), _DIGITS[:10]
        )
        np.testing.assert_allclose(
            affine_mnist.rotate(_DIGITS[:10], 360.0), _DIGITS[:10], atol=1e-5
        )

    def test_half_turn_of_a_non_square_image(self):
        images = _asymmetric((2, 5, 9))
        np.testing.assert_allclose(
            affine_mnist.rotate(images, 180),
            images[:, ::-1, ::-1],
            atol=1e-12,
        )

    def test_one_angle_per_image(self):
        images = _asymmetric((3, 6, 6))
        output = affine_mnist.rotate(images, np.array([0.0, 90.0, -90.0]))
        np.testing.assert_allclose(output[0], images[0], atol=1e-12)
        np.testing.assert_allclose(output[1], np.rot90(images[1]), atol=1e-12)
        np.testing.assert_allclose(
            output[2], np.rot90(images[2], -1), atol=1e-12
        )

    def test_matches_the_per_pixel_reference(self):
        images = _asymmetric((2, 7, 6))
        angles = [17.0, -41.0]
        output = affine_mnist.rotate(images, angles)
        for image, angle, result in zip(images, angles, output):
            expected = references.affine_warp(
                image, angle, 0.0, 1.0, 1.0, 0.0, 0.0, out_shape=(7, 6)
            )
            np.testing.assert_allclose(result, expected, atol=1e-12)


class ValidationTest(parameterized.TestCase):
    @parameterized.named_parameters(
        (
            "int_dtype",
            dict(images=np.zeros((2, 28, 28), "int64")),
            TypeError,
            r"`affine_mnist.translate`.*uint8.*Received: images.dtype=int64$",
        ),
        (
            "rank_2",
            dict(images=np.zeros((28, 28), "uint8")),
            ValueError,
            r"Received: images.shape=\(28, 28\)$",
        ),
        (
            "three_channels",
            dict(images=np.zeros((2, 28, 28, 3), "uint8")),
            ValueError,
            r"single channel.*Received: images.shape=",
        ),
        (
            "canvas_too_small",
            dict(canvas_size=27),
            ValueError,
            r"at least.*Received: canvas_size=27$",
        ),
        (
            "canvas_zero",
            dict(canvas_size=0),
            ValueError,
            r"positive integer.*Received: canvas_size=0$",
        ),
        ("negative_seed", dict(seed=-1), ValueError, r"Received: seed=-1$"),
        ("float_seed", dict(seed=1.5), ValueError, r"Received: seed=1.5$"),
    )
    def test_translate(self, kwargs, error, pattern):
        kwargs = {"images": _DIGITS[:2], **kwargs}
        with self.assertRaisesRegex(error, pattern):
            affine_mnist.translate(**kwargs)

    @parameterized.named_parameters(
        (
            "negative_rotation",
            dict(max_rotation=-1.0),
            ValueError,
            r"`affine_mnist.transform`.*non-negative number. "
            r"Received: max_rotation=-1.0$",
        ),
        (
            "string_rotation",
            dict(max_rotation="20"),
            TypeError,
            r"must be a Python number. Received: max_rotation='20'$",
        ),
        (
            "nan_shear",
            dict(max_shear=float("nan")),
            ValueError,
            r"Received: max_shear=nan$",
        ),
        (
            "bool_shear",
            dict(max_shear=True),
            TypeError,
            r"Received: max_shear=True$",
        ),
        (
            "scale_not_pair",
            dict(scale_range=1.0),
            ValueError,
            r"Received: scale_range=1.0$",
        ),
        (
            "scale_reversed",
            dict(scale_range=(1.2, 0.8)),
            ValueError,
            r"low <= high.*Received: scale_range=\(1.2, 0.8\)$",
        ),
        (
            "scale_zero",
            dict(scale_range=(0, 1)),
            ValueError,
            r"Received: scale_range=\(0, 1\)$",
        ),
        (
            "canvas_float",
            dict(canvas_size=40.0),
            ValueError,
            r"Received: canvas_size=40.0$",
        ),
        (
            "return_parameters_int",
            dict(return_parameters=1),
            TypeError,
            r"boolean. Received: return_parameters=1$",
        ),
        (
            "complex_dtype",
            dict(images=np.zeros((1, 28, 28), "complex64")),
            TypeError,
            r"Received: images.dtype=complex64$",
        ),
    )
    def test_transform(self, kwargs, error, pattern):
        kwargs = {"images": _DIGITS[:2], **kwargs}
        with self.assertRaisesRegex(error, pattern):
            affine_mnist.transform(**kwargs)

    @parameterized.named_parameters(
        (
            "wrong_length",
            [10.0, 20.0, 30.0],
            ValueError,
            r"`affine_mnist.rotate`.*\(2,\).*Received: angles.shape=\(3,\)$",
        ),
        (
            "matrix",
            np.zeros((2, 1)),
            ValueError,
            r"Received: angles.shape=\(2, 1\)$",
        ),
        ("string", "90", TypeError, r"Received: angles='90'$"),
        ("bool", True, TypeError, r"Received: angles=True$"),
        ("infinite", [0.0, np.inf], ValueError, r"finite.*Received: angles="),
    )
    def test_rotate(self, angles, error, pattern):
        with self.assertRaisesRegex(error, pattern):
            affine_mnist.rotate(_DIGITS[:2], angles)

    @parameterized.named_parameters(
        ("translate", affine_mnist.translate, {}),
        ("transform", affine_mnist.transform, {}),
        ("rotate", affine_mnist.rotate, {"angles": 30.0}),
    )
    def test_non_finite_images(self, function, kwargs):
        images = _DIGITS[:2]
        name = function.__name__
        for case, bad in non_finite.non_finite_images(images).items():
            with self.subTest(case=case):
                with self.assertRaisesRegex(
                    ValueError,
                    rf"^`affine_mnist.{name}`: argument `images` must hold "
                    r"finite values.*Received: images"
                    + non_finite.RECEIVED[case],
                ):
                    function(bad, **kwargs)
        # Any finite scale is transformed: the geometry ignores it.
        result = function(images * 255.0 - 100.0, **kwargs)
        self.assertTrue(np.all(np.isfinite(result)))
