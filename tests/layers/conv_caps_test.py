import re

import keras
import numpy as np
from absl.testing import parameterized
from keras import ops

from keras_capsules.layers import ConvCaps
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references

pytestmark = backend_marks.EAGER


def _numpy_conv_caps(
    x, kernel, bias, num_capsules, strides, padding, iterations, leaky=False
):
    """The official conv_slim_capsule, written out step by step.

    Every input capsule type is convolved on its own with the shared
    kernel, giving votes per (position, input type, output capsule); then
    Procedure 1 routes over the input types at each output position.
    Returns the outputs and the last coupling coefficients.
    """
    caps_in = x.shape[3]
    per_type = [
        references.conv2d(x[:, :, :, t, :], kernel, strides, padding)
        for t in range(caps_in)
    ]
    votes = np.stack(per_type, axis=3)
    votes = votes.reshape(votes.shape[:4] + (num_capsules, -1))
    return references.dynamic_routing(votes, iterations, bias, leaky)


def _inputs(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


class ConvCapsTest(TestCase):
    @parameterized.named_parameters(
        ("valid", (2, 5, 5, 3, 4), {}, (2, 3, 3, 2, 3), 2, 6),
        (
            "same_strided_other_options",
            (2, 5, 6, 2, 4),
            {
                "padding": "same",
                "strides": (2, 2),
                "routing_iterations": 2,
                "use_bias": False,
                "leaky_routing": True,
                "stop_gradient": True,
            },
            (2, 3, 3, 2, 3),
            1,
            0,
        ),
    )
    @backend_marks.COMPILED
    def test_layer(
        self, input_shape, kwargs, expected, num_weights, num_bias_params
    ):
        self.run_layer_test(
            ConvCaps,
            {
                "num_capsules": 2,
                "capsule_dim": 3,
                "kernel_size": (3, 3),
                **kwargs,
            },
            input_shape=input_shape,
            expected_output_shape=expected,
            expected_num_trainable_weights=num_weights,
            expected_num_params=3 * 3 * 4 * 2 * 3 + num_bias_params,
        )

    @parameterized.named_parameters(
        ("valid", "valid", (1, 1), 3, False),
        ("same_strided", "same", (2, 2), 3, False),
        ("leaky", "valid", (1, 2), 2, True),
    )
    def test_matches_numpy_reference(self, padding, strides, iterations, leaky):
        x = _inputs((2, 4, 5, 3, 2)) * 2.0
        layer = ConvCaps(
            num_capsules=2,
            capsule_dim=3,
            kernel_size=(2, 3),
            strides=strides,
            padding=padding,
            routing_iterations=iterations,
            leaky_routing=leaky,
            kernel_initializer="random_normal",
            bias_initializer="random_normal",
        )
        outputs = layer(x)
        expected, _ = _numpy_conv_caps(
            x,
            ops.convert_to_numpy(layer.kernel).astype("float64"),
            ops.convert_to_numpy(layer.bias),
            num_capsules=2,
            strides=strides,
            padding=padding,
            iterations=iterations,
            leaky=leaky,
        )
        self.assertEqual(tuple(outputs.shape), expected.shape)
        self.assertAllClose(outputs, expected, atol=1e-5, rtol=1e-5)

    @parameterized.named_parameters(
        ("valid", "valid", (1, 1), False),
        ("same_strided_leaky", "same", (2, 2), True),
    )
    def test_return_coupling(self, padding, strides, leaky):
        x = _inputs((2, 4, 5, 3, 2)) * 2.0
        layer = ConvCaps(
            num_capsules=2,
            capsule_dim=3,
            kernel_size=(2, 3),
            strides=strides,
            padding=padding,
            routing_iterations=2,
            leaky_routing=leaky,
            kernel_initializer="random_normal",
            bias_initializer="random_normal",
        )
        outputs = layer(x)
        routed, coupling = layer(x, return_coupling=True)
        # Asking for the coupling does not change the outputs.
        self.assertAllClose(routed, outputs, atol=0, rtol=0)
        _, expected = _numpy_conv_caps(
            x,
            ops.convert_to_numpy(layer.kernel).astype("float64"),
            ops.convert_to_numpy(layer.bias),
            num_capsules=2,
            strides=strides,
            padding=padding,
            iterations=2,
            leaky=leaky,
        )
        self.assertEqual(
            tuple(coupling.shape), tuple(outputs.shape[:3]) + (3, 2)
        )
        self.assertAllClose(coupling, expected, atol=1e-5, rtol=1e-5)
        totals = ops.convert_to_numpy(coupling).sum(axis=-1)
        if leaky:
            self.assertTrue(np.all(totals < 1.0))
        else:
            self.assertAllClose(totals, np.ones(totals.shape), atol=1e-6)
        symbolic = layer.compute_output_spec(
            keras.KerasTensor((None, 4, 5, 3, 2)), return_coupling=True
        )
        self.assertEqual(
            [tuple(t.shape) for t in symbolic],
            [
                (None,) + tuple(outputs.shape[1:]),
                (None,) + tuple(coupling.shape[1:]),
            ],
        )

    def test_kernel_is_shared_across_input_types(self):
        # Swapping two input capsule types permutes the votes but not their
        # set, so the routed outputs must not change.
        x = _inputs((1, 4, 4, 3, 2))
        layer = ConvCaps(2, 3, kernel_size=3)
        outputs = layer(x)
        self.assertAllClose(layer(x[:, :, :, ::-1]), outputs, atol=1e-6)

    @backend_marks.COMPILED
    def test_dynamic_spatial_size(self):
        inputs = keras.Input(shape=(None, None, 3, 4))
        outputs = ConvCaps(2, 3, kernel_size=3, strides=2)(inputs)
        self.assertEqual(tuple(outputs.shape), (None, None, None, 2, 3))
        model = keras.Model(inputs, outputs)
        predictions = model.predict(_inputs((2, 7, 5, 3, 4)), verbose=0)
        self.assertEqual(predictions.shape, (2, 3, 2, 2, 3))

    def test_integer_sizes_become_pairs(self):
        layer = ConvCaps(2, 3, kernel_size=3, strides=2, padding="Same")
        self.assertEqual(layer.kernel_size, (3, 3))
        self.assertEqual(layer.strides, (2, 2))
        self.assertEqual(layer.padding, "same")

    @parameterized.named_parameters(
        ("float16", "mixed_float16", "float16"),
        ("bfloat16", "mixed_bfloat16", "bfloat16"),
    )
    def test_mixed_precision(self, policy, compute_dtype):
        previous = keras.config.dtype_policy()
        self.addCleanup(keras.config.set_dtype_policy, previous)
        keras.config.set_dtype_policy(policy)
        layer = ConvCaps(2, 3, kernel_size=3)
        outputs = layer(_inputs((2, 5, 5, 3, 4)) * 100)
        self.assertEqual(
            keras.backend.standardize_dtype(outputs.dtype), compute_dtype
        )
        self.assertEqual(
            keras.backend.standardize_dtype(layer.kernel.dtype), "float32"
        )
        self.assertAllFinite(ops.cast(outputs, "float32"))

    def test_zero_and_large_inputs_stay_finite(self):
        shape = (4, 4, 3, 4)
        x = np.stack(
            [np.zeros(shape), np.full(shape, 1e4), _inputs(shape) * 1e4]
        ).astype("float32")
        outputs = ConvCaps(2, 3, kernel_size=3)(x)
        self.assertAllFinite(outputs)

    @parameterized.named_parameters(
        ("num_capsules", {"num_capsules": 0}, "num_capsules=0"),
        ("capsule_dim", {"capsule_dim": -1}, "capsule_dim=-1"),
        (
            "routing_iterations",
            {"routing_iterations": 0},
            "routing_iterations=0",
        ),
    )
    def test_invalid_counts_raise(self, override, received):
        kwargs = {
            "num_capsules": 2,
            "capsule_dim": 3,
            "kernel_size": 3,
            **override,
        }
        name = next(iter(override))
        with self.assertRaisesRegex(
            ValueError,
            rf"Argument {name} must be a positive integer\. "
            rf"Received: {received}$",
        ):
            ConvCaps(**kwargs)

    @parameterized.named_parameters(
        ("kernel_size", "kernel_size", (3, 0), r"\(3, 0\)"),
        ("strides", "strides", -1, r"-1"),
    )
    def test_invalid_pairs_raise(self, name, value, received):
        kwargs = {"num_capsules": 2, "capsule_dim": 3, "kernel_size": 3}
        kwargs[name] = value
        with self.assertRaisesRegex(
            ValueError,
            rf"Argument {name} must be a positive integer or a tuple of 2 "
            rf"positive integers\. Received: {name}={received}$",
        ):
            ConvCaps(**kwargs)

    def test_invalid_padding_raises(self):
        with self.assertRaisesRegex(
            ValueError,
            r'Argument padding must be "valid" or "same"\. '
            r"Received: padding=causal$",
        ):
            ConvCaps(2, 3, kernel_size=3, padding="causal")

    @parameterized.named_parameters(
        ("rank_4", (2, 5, 5, 12)),
        ("undefined_caps_in", (None, 5, 5, None, 4)),
        ("undefined_dim_in", (None, 5, 5, 3, None)),
    )
    def test_invalid_input_shape_raises(self, input_shape):
        with self.assertRaisesRegex(
            ValueError,
            r"Expected input of rank 5 \(batch, height, width, caps_in, "
            r"dim_in\) .* for ConvCaps\. Received: input_shape="
            rf"{re.escape(str(input_shape))}$",
        ):
            ConvCaps(2, 3, kernel_size=3).build(input_shape)

    def test_kernel_larger_than_input_raises(self):
        with self.assertRaisesRegex(
            ValueError,
            r"leaves no output positions .* \(5, 5\) .* "
            r"Received: kernel_size=\(9, 9\)$",
        ):
            ConvCaps(2, 3, kernel_size=9).build((None, 5, 5, 3, 4))
