import keras
import numpy as np
from absl.testing import parameterized
from keras import ops

from keras_capsules.ops import squash
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references

pytestmark = backend_marks.EAGER


class _SquashedWeight(keras.layers.Layer):
    """Feeds a trainable weight through `squash`, to take a gradient step."""

    def __init__(self, value, form, **kwargs):
        super().__init__(**kwargs)
        self.value = np.asarray(value, dtype="float32")
        self.form = form

    def build(self, input_shape):
        self.w = self.add_weight(
            name="w",
            shape=self.value.shape,
            initializer=keras.initializers.Constant(self.value),
        )

    def call(self, inputs):
        return inputs * ops.reshape(
            squash(self.w, squash_form=self.form), (1, -1)
        )


def _fit_one_step(value, form="rational"):
    """One SGD step on `squash(w)`; returns the updated weight and output."""
    inputs = keras.Input(shape=(1,))
    layer = _SquashedWeight(value, form)
    model = keras.Model(inputs, layer(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x = np.ones((2, 1), dtype="float32")
    y = np.ones((2, np.size(value)), dtype="float32")
    model.fit(x, y, batch_size=2, epochs=1, verbose=0)
    return ops.convert_to_numpy(layer.w), model.predict(x, verbose=0)


class SquashTest(TestCase):
    @parameterized.named_parameters(
        ("vector", (3,), -1, 1.0),
        ("batch", (4, 5), -1, 1.0),
        ("capsules", (2, 3, 8), -1, 1.0),
        ("middle_axis", (2, 8, 3), 1, 1.0),
        ("offset_half", (2, 3, 8), -1, 0.5),
        ("offset_half_middle_axis", (2, 8, 3), -2, 0.5),
    )
    def test_matches_numpy_reference(self, shape, axis, offset):
        rng = np.random.default_rng(0)
        # Scales from tiny to large lengths exercise both ends of the curve.
        x = rng.standard_normal(shape) * rng.choice([1e-2, 1.0, 10.0], shape)
        x = x.astype("float32")
        expected = references.squash(x, axis=axis, offset=offset)
        output = squash(x, axis=axis, offset=offset)
        self.assertEqual(tuple(output.shape), shape)
        self.assertAllClose(output, expected, atol=1e-6, rtol=1e-5)

    @parameterized.named_parameters(
        ("vector", (3,), -1),
        ("capsules", (2, 3, 8), -1),
        ("middle", (2, 8, 3), 1),
    )
    def test_exponential_matches_numpy_reference(self, shape, axis):
        rng = np.random.default_rng(0)
        x = rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 10.0], shape)
        x = x.astype("float32")
        expected = references.squash(x, axis=axis, form="exponential")
        output = squash(x, axis=axis, squash_form="exponential")
        self.assertAllClose(output, expected, atol=1e-6, rtol=1e-5)

    def test_exponential_form_values(self):
        x = np.array([[3.0, 4.0], [0.0, 0.0], [1e-4, 0.0]], dtype="float32")
        expected = np.array(
            [
                [0.6 * (1 - np.exp(-5.0)), 0.8 * (1 - np.exp(-5.0))],
                [0.0, 0.0],
                [1e-4 * (1 - np.exp(-1e-4)) / 1e-4, 0.0],
            ]
        )
        self.assertAllClose(
            squash(x, squash_form="exponential"), expected, atol=1e-7, rtol=1e-4
        )

    def test_invalid_form_raises(self):
        with self.assertRaisesRegex(
            ValueError, r"squash_form.*Received: squash_form=hinton$"
        ):
            squash(np.ones((2, 3), dtype="float32"), squash_form="hinton")

    def test_default_offset_is_the_paper_form(self):
        x = np.array([[3.0, 4.0]], dtype="float32")
        # |s| = 5: length 25 / 26 along (0.6, 0.8).
        self.assertAllClose(
            squash(x), np.array([[25 / 26 * 0.6, 25 / 26 * 0.8]]), atol=1e-6
        )
        self.assertAllClose(
            squash(x, offset=0.5),
            np.array([[25 / 25.5 * 0.6, 25 / 25.5 * 0.8]]),
            atol=1e-6,
        )

    def test_lengths_are_below_one(self):
        x = np.random.default_rng(1).standard_normal((5, 7, 4)) * 100
        lengths = np.linalg.norm(
            ops.convert_to_numpy(squash(x.astype("float32"))), axis=-1
        )
        self.assertTrue(np.all(lengths < 1.0))
        self.assertTrue(np.all(lengths >= 0.0))

    def test_zero_vector_gives_zero(self):
        x = np.zeros((2, 3, 4), dtype="float32")
        output = squash(x)
        self.assertAllFinite(output)
        self.assertAllClose(output, x, atol=0.0)

    @parameterized.named_parameters(
        ("zero", [0.0, 0.0, 0.0]),
        ("tiny", [1e-20, 0.0, -1e-20]),
        ("large", [1e4, -1e4, 1e4]),
    )
    @backend_marks.COMPILED
    def test_gradient_step_is_finite(self, value):
        for form in ("rational", "exponential"):
            weight, output = _fit_one_step(value, form)
            self.assertAllFinite(weight)
            self.assertAllFinite(output)

    @backend_marks.COMPILED
    def test_gradient_step_moves_nonzero_vector(self):
        value = [0.3, -0.2, 0.1]
        weight, _ = _fit_one_step(value)
        self.assertAllFinite(weight)
        self.assertFalse(np.allclose(weight, value))

    def test_large_magnitudes_are_finite(self):
        x = np.full((2, 16), 1e4, dtype="float32")
        output = ops.convert_to_numpy(squash(x))
        self.assertAllFinite(output)
        self.assertAllClose(np.linalg.norm(output, axis=-1), np.ones(2))

    @parameterized.named_parameters(
        ("float16", "float16"), ("bfloat16", "bfloat16")
    )
    def test_half_precision_keeps_dtype_and_stays_finite(self, dtype):
        # |s|^2 = 250,000 overflows float16, so this needs float32 inside.
        x = ops.cast(np.array([[300.0, 400.0], [0.0, 0.0]]), dtype)
        for form in ("rational", "exponential"):
            output = squash(x, squash_form=form)
            self.assertEqual(
                keras.backend.standardize_dtype(output.dtype), dtype
            )
            self.assertAllFinite(ops.cast(output, "float32"))
            self.assertAllClose(
                ops.cast(output, "float32"),
                np.array([[0.6, 0.8], [0.0, 0.0]]),
                atol=1e-2,
            )

    def test_integer_input_becomes_floatx(self):
        output = squash(np.array([[3, 4]], dtype="int32"))
        self.assertEqual(
            keras.backend.standardize_dtype(output.dtype),
            keras.config.floatx(),
        )

    def test_symbolic_input(self):
        output = squash(keras.Input(shape=(3, 8)))
        self.assertEqual(tuple(output.shape), (None, 3, 8))

    @parameterized.named_parameters(
        ("zero", 0),
        ("negative", -1.0),
        ("infinite", float("inf")),
        ("string", "1"),
        ("bool", True),
    )
    def test_invalid_offset_raises(self, offset):
        with self.assertRaisesRegex(
            ValueError,
            r"Argument offset must be a finite positive number\. "
            rf"Received: offset={offset}$",
        ):
            squash(np.ones((2, 3), dtype="float32"), offset=offset)

    @parameterized.named_parameters(("too_large", 2), ("too_small", -3))
    def test_axis_outside_the_rank_raises(self, axis):
        with self.assertRaisesRegex(
            ValueError,
            r"axis must be an axis of the input, of rank 2: an integer in "
            rf"\[-2, 1\]\. Received: axis={axis}$",
        ):
            squash(np.ones((2, 3), dtype="float32"), axis=axis)

    def test_axis_must_be_an_integer(self):
        with self.assertRaisesRegex(
            TypeError, r"axis must be an integer\. Received: axis=1\.0$"
        ):
            squash(np.ones((2, 3), dtype="float32"), axis=1.0)
