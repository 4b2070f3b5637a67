import re

import keras
import numpy as np
import pytest
from absl.testing import parameterized
from keras import ops

from keras_capsules.layers import PrimaryCaps
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references

pytestmark = backend_marks.EAGER


def _numpy_primary_caps(x, kernel, bias, capsule_dim, strides, padding):
    features = references.conv2d(x, kernel, strides, padding) + bias
    return references.squash(features.reshape(x.shape[0], -1, capsule_dim))


def _inputs(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


class PrimaryCapsTest(TestCase):
    @parameterized.named_parameters(
        ("valid", (2, 8, 8, 3), (3, 3), (2, 2), "valid", (2, 18, 4)),
        ("same_rectangular", (2, 6, 9, 3), (3, 2), (1, 3), "same", (2, 36, 4)),
    )
    # One geometry on every backend; the other, the same index arithmetic, on
    # the primary one.
    @pytest.mark.primary_backend(every_backend=("valid",))
    @backend_marks.COMPILED
    def test_layer(self, input_shape, kernel_size, strides, padding, expected):
        self.run_layer_test(
            PrimaryCaps,
            {
                "num_capsules": 2,
                "capsule_dim": 4,
                "kernel_size": kernel_size,
                "strides": strides,
                "padding": padding,
            },
            input_shape=input_shape,
            expected_output_shape=expected,
            expected_num_trainable_weights=2,
            expected_num_params=(
                kernel_size[0] * kernel_size[1] * input_shape[-1] * 8 + 8
            ),
        )

    @parameterized.named_parameters(("valid", "valid"), ("same", "same"))
    def test_matches_numpy_reference(self, padding):
        x = _inputs((2, 7, 7, 3))
        layer = PrimaryCaps(
            num_capsules=3,
            capsule_dim=2,
            kernel_size=3,
            strides=2,
            padding=padding,
            bias_initializer="random_normal",
        )
        outputs = layer(x)
        expected = _numpy_primary_caps(
            x,
            ops.convert_to_numpy(layer.kernel),
            ops.convert_to_numpy(layer.bias),
            capsule_dim=2,
            strides=(2, 2),
            padding=padding,
        )
        self.assertEqual(tuple(outputs.shape), expected.shape)
        self.assertAllClose(outputs, expected, atol=1e-5, rtol=1e-5)
        lengths = np.linalg.norm(ops.convert_to_numpy(outputs), axis=-1)
        self.assertTrue(np.all(lengths < 1.0))

    def test_capsule_order_is_row_column_type(self):
        layer = PrimaryCaps(
            num_capsules=2,
            capsule_dim=3,
            kernel_size=1,
            kernel_initializer="zeros",
            bias_initializer="zeros",
        )
        layer.build((1, 2, 2, 1))
        # Zero kernel and a bias per channel: capsule k at every position
        # is squash(bias[3k : 3k + 3]).
        bias = np.arange(1.0, 7.0, dtype="float32")
        layer.bias.assign(bias)
        outputs = ops.convert_to_numpy(layer(np.zeros((1, 2, 2, 1), "float32")))
        expected = references.squash(bias.reshape(2, 3))
        self.assertAllClose(outputs[0], np.tile(expected, (4, 1)), atol=1e-6)

    def test_paper_configuration(self):
        layer = PrimaryCaps(
            num_capsules=32, capsule_dim=8, kernel_size=9, strides=2
        )
        self.assertEqual(
            layer.compute_output_shape((None, 20, 20, 256)), (None, 1152, 8)
        )
        layer.build((None, 20, 20, 256))
        self.assertEqual(layer.count_params(), 9 * 9 * 256 * 256 + 256)

    def test_integer_sizes_become_pairs(self):
        layer = PrimaryCaps(
            num_capsules=2, capsule_dim=4, kernel_size=3, strides=2
        )
        self.assertEqual(layer.kernel_size, (3, 3))
        self.assertEqual(layer.strides, (2, 2))
        self.assertEqual(layer.get_config()["kernel_size"], (3, 3))
        self.assertEqual(PrimaryCaps(2, 4, 3, padding="SAME").padding, "same")

    @backend_marks.COMPILED
    def test_dynamic_spatial_size(self):
        inputs = keras.Input(shape=(None, None, 3))
        outputs = PrimaryCaps(2, 4, kernel_size=3, strides=2)(inputs)
        self.assertEqual(tuple(outputs.shape), (None, None, 4))
        model = keras.Model(inputs, outputs)
        predictions = model.predict(_inputs((2, 9, 7, 3)), verbose=0)
        self.assertEqual(predictions.shape, (2, 4 * 3 * 2, 4))

    @parameterized.named_parameters(
        ("float16", "mixed_float16", "float16"),
        ("bfloat16", "mixed_bfloat16", "bfloat16"),
    )
    def test_mixed_precision(self, policy, compute_dtype):
        previous = keras.config.dtype_policy()
        self.addCleanup(keras.config.set_dtype_policy, previous)
        keras.config.set_dtype_policy(policy)
        layer = PrimaryCaps(2, 4, kernel_size=3, strides=2)
        outputs = layer(_inputs((2, 8, 8, 3)) * 100)
        self.assertEqual(
            keras.backend.standardize_dtype(outputs.dtype), compute_dtype
        )
        self.assertEqual(
            keras.backend.standardize_dtype(layer.kernel.dtype), "float32"
        )
        self.assertAllFinite(ops.cast(outputs, "float32"))

    @parameterized.named_parameters(
        ("num_capsules", {"num_capsules": 0}, r"num_capsules=0"),
        ("capsule_dim", {"capsule_dim": -1}, r"capsule_dim=-1"),
        ("capsule_dim_float", {"capsule_dim": 2.0}, r"capsule_dim=2\.0"),
    )
    def test_invalid_sizes_raise(self, override, received):
        kwargs = {"num_capsules": 2, "capsule_dim": 4, "kernel_size": 3}
        kwargs.update(override)
        name = next(iter(override))
        with self.assertRaisesRegex(
            ValueError,
            rf"Argument {name} must be a positive integer\. "
            rf"Received: {received}$",
        ):
            PrimaryCaps(**kwargs)

    @parameterized.named_parameters(
        ("kernel_zero", "kernel_size", 0, r"0"),
        ("kernel_triple", "kernel_size", (3, 3, 3), r"\(3, 3, 3\)"),
        ("strides_zero", "strides", (1, 0), r"\(1, 0\)"),
    )
    def test_invalid_pairs_raise(self, name, value, received):
        kwargs = {"num_capsules": 2, "capsule_dim": 4, "kernel_size": 3}
        kwargs[name] = value
        with self.assertRaisesRegex(
            ValueError,
            rf"Argument {name} must be a positive integer or a tuple of 2 "
            rf"positive integers\. Received: {name}={received}$",
        ):
            PrimaryCaps(**kwargs)

    def test_invalid_padding_raises(self):
        with self.assertRaisesRegex(
            ValueError,
            r'Argument padding must be "valid" or "same"\. '
            r"Received: padding=full$",
        ):
            PrimaryCaps(2, 4, kernel_size=3, padding="full")

    @parameterized.named_parameters(
        ("rank_3", (2, 8, 3)), ("rank_5", (2, 8, 8, 3, 1))
    )
    def test_wrong_input_rank_raises(self, input_shape):
        with self.assertRaisesRegex(
            ValueError,
            r"Expected input of rank 4 \(batch, height, width, channels\) "
            r"for PrimaryCaps\. Received: input_shape="
            rf"{re.escape(str(input_shape))}$",
        ):
            PrimaryCaps(2, 4, kernel_size=3).build(input_shape)

    def test_undefined_channels_raise(self):
        with self.assertRaisesRegex(
            ValueError,
            r"channels dimension .* must be defined\. "
            r"Received: input_shape=\(None, 8, 8, None\)$",
        ):
            PrimaryCaps(2, 4, kernel_size=3).build((None, 8, 8, None))

    def test_kernel_larger_than_input_raises(self):
        with self.assertRaisesRegex(
            ValueError,
            r"leaves no output positions .* \(5, 5\) .* "
            r"Received: kernel_size=\(9, 9\)$",
        ):
            PrimaryCaps(32, 8, kernel_size=9).build((None, 5, 5, 16))
