import re

import keras
import numpy as np
from absl.testing import parameterized
from keras import ops

from keras_capsules.layers import DepthwisePrimaryCaps
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references

pytestmark = backend_marks.EAGER


def _inputs(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def _numpy_depthwise_primary_caps(x, kernel, bias, strides, capsule_dim, form):
    """The depthwise convolution, split into capsules per position and
    squashed."""
    outputs = references.depthwise_conv2d(x, kernel, strides, "valid") + bias
    capsules = outputs.reshape((x.shape[0], -1, capsule_dim))
    return references.squash(capsules, form=form)


class DepthwisePrimaryCapsTest(TestCase):
    @parameterized.named_parameters(
        ("whole_map", (2, 5, 5, 8), {"kernel_size": 5}, (2, 2, 4), 8 * 25 + 8),
        (
            "strided_multiplier",
            (2, 7, 7, 4),
            {"kernel_size": 3, "strides": 2, "depth_multiplier": 2},
            (2, 18, 4),
            4 * 2 * 9 + 8,
        ),
        (
            "same",
            (2, 4, 4, 4),
            {"kernel_size": 3, "padding": "same"},
            (2, 16, 4),
            4 * 9 + 4,
        ),
    )
    @backend_marks.COMPILED
    def test_layer(self, input_shape, kwargs, expected, num_params):
        self.run_layer_test(
            DepthwisePrimaryCaps,
            {"capsule_dim": 4, **kwargs},
            input_shape=input_shape,
            expected_output_shape=expected,
            expected_num_trainable_weights=2,
            expected_num_params=num_params,
        )

    @parameterized.named_parameters(
        ("exponential", 1, 1, "exponential"),
        ("strided_rational", 2, 2, "rational"),
        ("single_window", 5, 1, "exponential"),
    )
    def test_matches_numpy_reference(self, strides, multiplier, form):
        x = _inputs((2, 7, 7, 4))
        layer = DepthwisePrimaryCaps(
            capsule_dim=4,
            kernel_size=3,
            strides=strides,
            depth_multiplier=multiplier,
            squash_form=form,
            bias_initializer="random_normal",
        )
        outputs = layer(x)
        expected = _numpy_depthwise_primary_caps(
            x.astype("float64"),
            ops.convert_to_numpy(layer.kernel).astype("float64"),
            ops.convert_to_numpy(layer.bias),
            (strides, strides),
            4,
            form,
        )
        self.assertAllClose(outputs, expected, atol=1e-5, rtol=1e-5)

    def test_paper_configuration(self):
        layer = DepthwisePrimaryCaps(capsule_dim=8, kernel_size=9)
        self.assertEqual(
            layer.compute_output_shape((None, 9, 9, 128)), (None, 16, 8)
        )
        layer.build((None, 9, 9, 128))
        self.assertEqual(layer.count_params(), 10_496)

    @backend_marks.COMPILED
    def test_dynamic_spatial_size(self):
        inputs = keras.Input(shape=(None, None, 8))
        model = keras.Model(
            inputs, DepthwisePrimaryCaps(capsule_dim=4, kernel_size=3)(inputs)
        )
        outputs = model.predict(_inputs((2, 5, 6, 8)), verbose=0)
        self.assertEqual(outputs.shape, (2, 3 * 4 * 2, 4))

    def test_zero_and_large_inputs_stay_finite(self):
        x = np.stack([np.zeros((5, 5, 8)), np.full((5, 5, 8), 1e4)])
        layer = DepthwisePrimaryCaps(capsule_dim=4, kernel_size=5)
        self.assertAllFinite(layer(x.astype("float32")))

    @parameterized.named_parameters(
        ("float16", "mixed_float16", "float16"),
        ("bfloat16", "mixed_bfloat16", "bfloat16"),
    )
    def test_mixed_precision(self, policy, compute_dtype):
        previous = keras.config.dtype_policy()
        self.addCleanup(keras.config.set_dtype_policy, previous)
        keras.config.set_dtype_policy(policy)
        outputs = DepthwisePrimaryCaps(capsule_dim=4, kernel_size=3)(
            _inputs((2, 5, 5, 8)) * 100
        )
        self.assertEqual(
            keras.backend.standardize_dtype(outputs.dtype), compute_dtype
        )
        self.assertAllFinite(ops.cast(outputs, "float32"))

    @parameterized.named_parameters(
        ("capsule_dim", {"capsule_dim": 0}, "capsule_dim=0"),
        ("depth_multiplier", {"depth_multiplier": -1}, "depth_multiplier=-1"),
        ("squash_form", {"squash_form": "cube"}, "squash_form=cube"),
        ("padding", {"padding": "full"}, "padding=full"),
    )
    def test_invalid_arguments_raise(self, override, received):
        kwargs = {"capsule_dim": 4, "kernel_size": 3, **override}
        with self.assertRaisesRegex(
            ValueError, rf"Received: {re.escape(received)}$"
        ):
            DepthwisePrimaryCaps(**kwargs)

    def test_indivisible_channels_raise(self):
        with self.assertRaisesRegex(
            ValueError,
            r"capsule_dim=3 components, which must divide them\. "
            r"Received: input_shape=\(None, 5, 5, 8\)$",
        ):
            DepthwisePrimaryCaps(capsule_dim=3, kernel_size=3).build(
                (None, 5, 5, 8)
            )

    @parameterized.named_parameters(
        ("rank_3", (2, 5, 8)), ("undefined_channels", (None, 5, 5, None))
    )
    def test_invalid_input_shape_raises(self, input_shape):
        with self.assertRaisesRegex(
            ValueError,
            rf"Received: input_shape={re.escape(str(input_shape))}$",
        ):
            DepthwisePrimaryCaps(capsule_dim=4, kernel_size=3).build(
                input_shape
            )
