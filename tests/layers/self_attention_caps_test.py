import re

import keras
import numpy as np
from absl.testing import parameterized
from keras import ops

from keras_capsules.layers import SelfAttentionCaps
from keras_capsules.ops import self_attention_routing
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references

pytestmark = backend_marks.EAGER


def _inputs(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


class SelfAttentionCapsTest(TestCase):
    @parameterized.named_parameters(
        ("default", {}, 2, 6 * 3),
        (
            "no_prior_rational",
            {"use_prior": False, "squash_form": "rational"},
            1,
            0,
        ),
    )
    @backend_marks.COMPILED
    def test_layer(self, kwargs, num_weights, num_prior_params):
        self.run_layer_test(
            SelfAttentionCaps,
            {"num_capsules": 3, "capsule_dim": 5, **kwargs},
            input_shape=(2, 6, 4),
            expected_output_shape=(2, 3, 5),
            expected_num_trainable_weights=num_weights,
            expected_num_params=6 * 4 * 3 * 5 + num_prior_params,
        )

    @parameterized.named_parameters(
        ("exponential", "exponential"), ("rational", "rational")
    )
    def test_matches_numpy_reference(self, form):
        x = _inputs((3, 6, 4))
        layer = SelfAttentionCaps(
            3, 5, squash_form=form, prior_initializer="random_normal"
        )
        outputs = layer(x)
        kernel = ops.convert_to_numpy(layer.kernel).astype("float64")
        votes = np.einsum("bid,ijde->bije", x, kernel)
        expected, _ = references.self_attention_routing(
            votes, ops.convert_to_numpy(layer.prior), squash_form=form
        )
        self.assertAllClose(outputs, expected, atol=1e-5, rtol=1e-5)

    def test_votes_are_what_call_routes(self):
        x = _inputs((2, 6, 4))
        layer = SelfAttentionCaps(3, 5, prior_initializer="random_normal")
        with self.assertRaisesRegex(ValueError, "has no kernel yet"):
            layer.votes(x)
        outputs = layer(x)
        votes = layer.votes(x)
        self.assertEqual(tuple(votes.shape), (2, 6, 3, 5))
        routed, coupling = self_attention_routing(
            votes,
            prior=layer.prior,
            squash_form=layer.squash_form,
            return_coupling=True,
        )
        self.assertAllClose(routed, outputs, atol=0, rtol=0)
        self.assertEqual(tuple(coupling.shape), (2, 6, 3))

    def test_paper_class_capsules(self):
        layer = SelfAttentionCaps(num_capsules=10, capsule_dim=16)
        layer.build((None, 16, 8))
        self.assertEqual(tuple(layer.kernel.shape), (16, 10, 8, 16))
        self.assertEqual(layer.count_params(), 20_640)
        self.assertAllClose(layer.prior, np.zeros((16, 10)))
        # he_normal with the authors' fan-in, 16 * 10 * 8 = 1280.
        kernel = ops.convert_to_numpy(layer.kernel)
        self.assertAllClose(np.std(kernel), np.sqrt(2 / 1280), rtol=0.05)

    def test_config_round_trips_initializers(self):
        layer = SelfAttentionCaps(
            3, 5, kernel_initializer="ones", squash_form="rational"
        )
        revived = SelfAttentionCaps.from_config(layer.get_config())
        self.assertEqual(revived.squash_form, "rational")
        revived.build((None, 2, 2))
        self.assertAllClose(revived.kernel, np.ones((2, 3, 2, 5)))

    @backend_marks.COMPILED
    def test_jit_compiled_fit_step(self):
        jit_compile = "auto" if keras.backend.backend() == "torch" else True
        inputs = keras.Input(shape=(6, 4))
        model = keras.Model(inputs, SelfAttentionCaps(3, 5)(inputs))
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss="mse",
            jit_compile=jit_compile,
        )
        layer = model.layers[-1]
        before = ops.convert_to_numpy(layer.kernel)
        history = model.fit(
            _inputs((4, 6, 4)),
            np.full((4, 3, 5), 0.1, dtype="float32"),
            batch_size=2,
            epochs=1,
            verbose=0,
        )
        self.assertTrue(np.isfinite(history.history["loss"][-1]))
        self.assertAllFinite([layer.kernel, layer.prior])
        self.assertFalse(
            np.allclose(before, ops.convert_to_numpy(layer.kernel))
        )

    def test_zero_and_large_inputs_stay_finite(self):
        x = np.stack(
            [np.zeros((6, 4)), np.full((6, 4), 1e4), _inputs((6, 4)) * 1e4]
        ).astype("float32")
        self.assertAllFinite(SelfAttentionCaps(3, 5)(x))

    @parameterized.named_parameters(
        ("float16", "mixed_float16", "float16"),
        ("bfloat16", "mixed_bfloat16", "bfloat16"),
    )
    def test_mixed_precision(self, policy, compute_dtype):
        previous = keras.config.dtype_policy()
        self.addCleanup(keras.config.set_dtype_policy, previous)
        keras.config.set_dtype_policy(policy)
        layer = SelfAttentionCaps(3, 5)
        outputs = layer(_inputs((2, 6, 4)) * 100)
        self.assertEqual(
            keras.backend.standardize_dtype(outputs.dtype), compute_dtype
        )
        self.assertEqual(
            keras.backend.standardize_dtype(layer.kernel.dtype), "float32"
        )
        self.assertAllFinite(ops.cast(outputs, "float32"))

    @parameterized.named_parameters(
        (
            "num_capsules",
            {"num_capsules": 0},
            "positive integer",
            "num_capsules=0",
        ),
        (
            "capsule_dim",
            {"capsule_dim": 2.5},
            "positive integer",
            "capsule_dim=2.5",
        ),
        ("squash_form", {"squash_form": "hinton"}, "", "squash_form=hinton"),
    )
    def test_invalid_arguments_raise(self, override, expected, received):
        kwargs = {"num_capsules": 3, "capsule_dim": 5, **override}
        with self.assertRaisesRegex(
            ValueError, rf"{expected}.*Received: {received}$"
        ):
            SelfAttentionCaps(**kwargs)

    @parameterized.named_parameters(
        ("rank_2", (2, 8)), ("undefined_num_in", (None, None, 8))
    )
    def test_invalid_input_shape_raises(self, input_shape):
        with self.assertRaisesRegex(
            ValueError,
            r"Expected input of rank 3 \(batch, num_in, dim_in\) .*"
            r"for SelfAttentionCaps\. Received: input_shape="
            rf"{re.escape(str(input_shape))}$",
        ):
            SelfAttentionCaps(3, 5).build(input_shape)
