import re

import keras
import numpy as np
from absl.testing import parameterized
from keras import ops

from keras_capsules.layers import DenseCaps
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references

pytestmark = backend_marks.EAGER


def _numpy_dense_caps(x, kernel, bias, iterations, leaky=False):
    """Eq. 2 votes, then Procedure 1 (with the official bias and leak)."""
    votes = np.einsum("bid,idjk->bijk", x, kernel)
    return references.dynamic_routing(votes, iterations, bias, leaky)[0]


def _inputs(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


class DenseCapsTest(TestCase):
    @parameterized.named_parameters(
        ("default", {}, 1, 0),
        (
            "all_options",
            {
                "routing_iterations": 2,
                "use_bias": True,
                "leaky_routing": True,
                "stop_gradient": True,
            },
            2,
            15,
        ),
    )
    @backend_marks.COMPILED
    def test_layer(self, kwargs, num_weights, num_bias_params):
        self.run_layer_test(
            DenseCaps,
            {"num_capsules": 3, "capsule_dim": 5, **kwargs},
            input_shape=(2, 6, 4),
            expected_output_shape=(2, 3, 5),
            expected_num_trainable_weights=num_weights,
            expected_num_params=6 * 4 * 3 * 5 + num_bias_params,
        )

    @parameterized.named_parameters(
        ("plain", 3, False, False),
        ("one_iteration", 1, False, False),
        ("bias", 3, True, False),
        ("bias_leaky", 2, True, True),
    )
    def test_matches_numpy_reference(self, iterations, use_bias, leaky):
        x = _inputs((3, 6, 4)) * 2.0
        layer = DenseCaps(
            num_capsules=3,
            capsule_dim=5,
            routing_iterations=iterations,
            use_bias=use_bias,
            leaky_routing=leaky,
            bias_initializer="random_normal",
        )
        outputs = layer(x)
        expected = _numpy_dense_caps(
            x,
            ops.convert_to_numpy(layer.kernel).astype("float64"),
            ops.convert_to_numpy(layer.bias) if use_bias else None,
            iterations,
            leaky=leaky,
        )
        self.assertAllClose(outputs, expected, atol=1e-5, rtol=1e-5)

    @parameterized.named_parameters(
        ("plain", 3, False, False),
        ("bias_leaky", 2, True, True),
    )
    def test_return_coupling(self, iterations, use_bias, leaky):
        x = _inputs((2, 6, 4)) * 2.0
        layer = DenseCaps(
            num_capsules=3,
            capsule_dim=5,
            routing_iterations=iterations,
            use_bias=use_bias,
            leaky_routing=leaky,
            bias_initializer="random_normal",
        )
        outputs = layer(x)
        routed, coupling = layer(x, return_coupling=True)
        self.assertEqual(tuple(coupling.shape), (2, 6, 3))
        # Asking for the coupling does not change the outputs.
        self.assertAllClose(routed, outputs, atol=0, rtol=0)
        votes = np.einsum(
            "bid,idjk->bijk", x, ops.convert_to_numpy(layer.kernel)
        )
        bias = ops.convert_to_numpy(layer.bias) if use_bias else None
        _, expected = references.dynamic_routing(votes, iterations, bias, leaky)
        self.assertAllClose(coupling, expected, atol=1e-5, rtol=1e-5)
        totals = ops.convert_to_numpy(coupling).sum(axis=-1)
        if leaky:
            self.assertTrue(np.all(totals < 1.0))
        else:
            self.assertAllClose(totals, np.ones((2, 6)), atol=1e-6)

    def test_return_coupling_symbolic(self):
        inputs = keras.Input((6, 4))
        outputs, coupling = DenseCaps(num_capsules=3, capsule_dim=5)(
            inputs, return_coupling=True
        )
        self.assertEqual(tuple(outputs.shape), (None, 3, 5))
        self.assertEqual(tuple(coupling.shape), (None, 6, 3))
        model = keras.Model(inputs, [outputs, coupling])
        eager_outputs, eager_coupling = model(_inputs((2, 6, 4)))
        self.assertEqual(tuple(eager_coupling.shape), (2, 6, 3))

    def test_paper_digit_caps_parameter_count(self):
        layer = DenseCaps(num_capsules=10, capsule_dim=16)
        self.assertEqual(
            layer.compute_output_shape((None, 1152, 8)), (None, 10, 16)
        )
        layer.build((None, 1152, 8))
        self.assertEqual(tuple(layer.kernel.shape), (1152, 8, 10, 16))
        self.assertEqual(layer.count_params(), 1_474_560)

    def test_default_initializers_are_the_official_ones(self):
        first = DenseCaps(num_capsules=10, capsule_dim=16, use_bias=True)
        first.build((None, 64, 8))
        kernel = ops.convert_to_numpy(first.kernel)
        # TruncatedNormal(stddev=0.1) cuts at 2 stddev, leaving a std of
        # about 0.088.
        self.assertLessEqual(np.max(np.abs(kernel)), 0.2 + 1e-6)
        self.assertAllClose(np.std(kernel), 0.088, atol=0.005, rtol=0)
        self.assertAllClose(first.bias, np.full((10, 16), 0.1))
        # Each layer draws its own kernel.
        second = DenseCaps(num_capsules=10, capsule_dim=16)
        second.build((None, 64, 8))
        self.assertFalse(
            np.allclose(kernel, ops.convert_to_numpy(second.kernel))
        )

    def test_config_round_trips_initializers(self):
        layer = DenseCaps(3, 5, kernel_initializer="ones", use_bias=True)
        revived = DenseCaps.from_config(layer.get_config())
        revived.build((None, 2, 2))
        self.assertAllClose(revived.kernel, np.ones((2, 2, 3, 5)))
        self.assertAllClose(revived.bias, np.full((3, 5), 0.1))

    @backend_marks.COMPILED
    def test_jit_compiled_fit_step(self):
        # Torch's compiler is not a requirement here; "auto" leaves it off.
        jit_compile = "auto" if keras.backend.backend() == "torch" else True
        inputs = keras.Input(shape=(6, 4))
        outputs = DenseCaps(3, 5, use_bias=True, leaky_routing=True)(inputs)
        model = keras.Model(inputs, outputs)
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss="mse",
            jit_compile=jit_compile,
        )
        x = _inputs((4, 6, 4))
        y = np.full((4, 3, 5), 0.1, dtype="float32")
        before = ops.convert_to_numpy(model.layers[-1].kernel)
        history = model.fit(x, y, batch_size=2, epochs=1, verbose=0)
        self.assertTrue(np.isfinite(history.history["loss"][-1]))
        after = ops.convert_to_numpy(model.layers[-1].kernel)
        self.assertAllFinite(after)
        self.assertFalse(np.allclose(before, after))

    @backend_marks.COMPILED
    def test_variable_batch_size(self):
        inputs = keras.Input(shape=(6, 4))
        model = keras.Model(inputs, DenseCaps(3, 5)(inputs))
        for batch_size in (1, 3):
            predictions = model.predict(_inputs((batch_size, 6, 4)), verbose=0)
            self.assertEqual(predictions.shape, (batch_size, 3, 5))

    def test_zero_and_large_inputs_stay_finite(self):
        x = np.stack(
            [np.zeros((6, 4)), np.full((6, 4), 1e4), _inputs((6, 4)) * 1e4]
        ).astype("float32")
        outputs = DenseCaps(3, 5, use_bias=True)(x)
        self.assertAllFinite(outputs)

    @parameterized.named_parameters(
        ("float16", "mixed_float16", "float16"),
        ("bfloat16", "mixed_bfloat16", "bfloat16"),
    )
    def test_mixed_precision(self, policy, compute_dtype):
        previous = keras.config.dtype_policy()
        self.addCleanup(keras.config.set_dtype_policy, previous)
        keras.config.set_dtype_policy(policy)
        layer = DenseCaps(3, 5, use_bias=True)
        outputs = layer(_inputs((2, 6, 4)) * 100)
        self.assertEqual(
            keras.backend.standardize_dtype(outputs.dtype), compute_dtype
        )
        self.assertEqual(
            keras.backend.standardize_dtype(layer.kernel.dtype), "float32"
        )
        self.assertAllFinite(ops.cast(outputs, "float32"))

    @parameterized.named_parameters(
        ("num_capsules", {"num_capsules": 0}, "num_capsules=0"),
        ("capsule_dim", {"capsule_dim": -3}, "capsule_dim=-3"),
        (
            "routing_iterations",
            {"routing_iterations": 0},
            "routing_iterations=0",
        ),
        (
            "routing_iterations_none",
            {"routing_iterations": None},
            "routing_iterations=None",
        ),
    )
    def test_invalid_arguments_raise(self, override, received):
        kwargs = {"num_capsules": 3, "capsule_dim": 5, **override}
        name = next(iter(override))
        with self.assertRaisesRegex(
            ValueError,
            rf"Argument {name} must be a positive integer\. "
            rf"Received: {received}$",
        ):
            DenseCaps(**kwargs)

    @parameterized.named_parameters(
        ("use_bias", "use_bias"),
        ("leaky_routing", "leaky_routing"),
        ("stop_gradient", "stop_gradient"),
    )
    def test_non_boolean_option_raises(self, name):
        with self.assertRaisesRegex(
            TypeError, rf"{name} must be a boolean\. Received: {name}=1$"
        ):
            DenseCaps(num_capsules=3, capsule_dim=5, **{name: 1})

    @parameterized.named_parameters(
        ("rank_2", (2, 8)),
        ("rank_4", (2, 6, 6, 8)),
        ("undefined_num_in", (None, None, 8)),
        ("undefined_dim_in", (None, 6, None)),
    )
    def test_invalid_input_shape_raises(self, input_shape):
        with self.assertRaisesRegex(
            ValueError,
            r"Expected input of rank 3 \(batch, num_in, dim_in\) .*"
            r"for DenseCaps\. Received: input_shape="
            rf"{re.escape(str(input_shape))}$",
        ):
            DenseCaps(3, 5).build(input_shape)
