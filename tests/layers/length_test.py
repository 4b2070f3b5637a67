import keras
import numpy as np
from absl.testing import parameterized

from keras_capsules.layers import Length
from keras_capsules.testing import TestCase
from tests import backend_marks

pytestmark = backend_marks.EAGER


def _numpy_length(x, axis=-1):
    x = np.asarray(x, dtype="float64")
    return np.sqrt(np.sum(x**2, axis=axis) + keras.config.epsilon())


class LengthTest(TestCase):
    @parameterized.named_parameters(
        ("vector_capsules", {}, (2, 10, 16), (2, 10)),
        ("middle_axis", {"axis": 1}, (2, 4, 3), (2, 3)),
        ("rank_4", {"axis": -1}, (2, 3, 5, 4), (2, 3, 5)),
        ("rank_2", {}, (3, 8), (3,)),
    )
    @backend_marks.COMPILED
    def test_layer_basics(self, init_kwargs, input_shape, output_shape):
        self.run_layer_test(
            Length,
            init_kwargs,
            input_shape=input_shape,
            expected_output_shape=output_shape,
            expected_num_trainable_weights=0,
            # Nothing to train in a weightless layer (TensorFlow and torch
            # warn); training through it is tested separately.
            run_training_check=False,
        )

    @parameterized.named_parameters(
        ("last_axis", -1),
        ("middle_axis", 1),
        ("positive_last", 2),
    )
    def test_matches_numpy(self, axis):
        x = np.random.default_rng(1).normal(size=(3, 5, 4)).astype("float32")
        self.assertAllClose(
            Length(axis=axis)(x), _numpy_length(x, axis), atol=1e-6
        )

    def test_pythagoras(self):
        x = np.array([[[3.0, 4.0], [0.0, 0.0]]], dtype="float32")
        self.assertAllClose(
            Length()(x),
            np.array([[5.0, np.sqrt(keras.config.epsilon())]]),
            atol=1e-6,
        )

    @backend_marks.COMPILED
    def test_finite_gradient_at_zero_capsules(self):
        # A zero kernel makes every capsule exactly zero, where the exact
        # norm has no gradient: a NaN there would poison the kernel.
        inputs = keras.Input(shape=(4,))
        x = keras.layers.Dense(12, kernel_initializer="zeros")(inputs)
        x = keras.layers.Reshape((3, 4))(x)
        model = keras.Model(inputs, Length()(x))
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        data = np.ones((2, 4), dtype="float32")
        model.fit(data, np.ones((2, 3), "float32"), epochs=1, verbose=0)
        self.assertAllFinite(model.weights)

    def test_large_magnitudes(self):
        x = np.full((2, 3, 16), 1e4, dtype="float32")
        self.assertAllClose(Length()(x), _numpy_length(x), rtol=1e-6)

    @parameterized.named_parameters(
        ("float16", "mixed_float16"), ("bfloat16", "mixed_bfloat16")
    )
    def test_mixed_precision(self, policy):
        original = keras.config.dtype_policy()
        keras.config.set_dtype_policy(policy)
        self.addCleanup(keras.config.set_dtype_policy, original)
        # Squares of 1e3 overflow float16 (max 65504) unless summed in
        # float32.
        x = np.full((2, 3, 16), 1e3, dtype="float32")
        layer = Length()
        y = layer(x)
        self.assertEqual(
            keras.backend.standardize_dtype(y.dtype), layer.compute_dtype
        )
        self.assertAllFinite(y)
        self.assertAllClose(
            np.asarray(keras.ops.convert_to_numpy(y), "float32"),
            _numpy_length(x),
            rtol=1e-2,
        )

    def test_axis_type_error(self):
        with self.assertRaisesRegex(
            TypeError, r"axis must be an integer\. Received: axis=1\.5"
        ):
            Length(axis=1.5)

    def test_axis_out_of_range(self):
        with self.assertRaisesRegex(
            ValueError, r"out of range .*Received: input_shape=\(2, 3, 4\)"
        ):
            Length(axis=3).build((2, 3, 4))

    def test_batch_axis_rejected(self):
        with self.assertRaisesRegex(
            ValueError, r"batch axis .*Received: axis=-3"
        ):
            Length(axis=-3).build((2, 3, 4))

    def test_rank_1_rejected(self):
        with self.assertRaisesRegex(ValueError, "min_ndim=2"):
            Length()(np.ones((3,), "float32"))
