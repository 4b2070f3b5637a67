import keras
import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules import ops as capsule_ops
from keras_capsules.layers import EMConvCaps
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references

pytestmark = backend_marks.EAGER


def _capsules(shape, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    poses = scale * rng.normal(size=shape + (4, 4))
    activations = rng.uniform(size=shape)
    return [poses.astype("float32"), activations.astype("float32")]


class EMConvCapsTest(TestCase):
    @parameterized.named_parameters(
        ("k3_s2_valid", {"strides": (2, 2)}, (5, 5), (2, 2)),
        (
            "k3_s1_same_paper",
            {"padding": "same", "routing_mode": "paper"},
            (3, 3),
            (3, 3),
        ),
        (
            "k3_s2_official_setting",
            {"strides": (2, 2), **capsule_ops.OFFICIAL_EM_OPTIONS},
            (5, 5),
            (2, 2),
        ),
    )
    # The official setting on every backend; the other geometries, the same
    # index arithmetic, on the primary one.
    @pytest.mark.primary_backend(every_backend=("k3_s2_official_setting",))
    @backend_marks.COMPILED
    def test_layer_basics(self, extra_kwargs, grid, out_grid):
        init_kwargs = {"num_capsules": 2, "kernel_size": (3, 3)}
        init_kwargs.update(extra_kwargs)
        self.run_layer_test(
            EMConvCaps,
            init_kwargs,
            input_data=_capsules((2,) + grid + (3,)),
            expected_output_shape=[
                (2,) + out_grid + (2, 4, 4),
                (2,) + out_grid + (2,),
            ],
            expected_num_trainable_weights=3,
            expected_num_params=3 * 3 * 3 * 2 * 16 + 2 * 2,
        )

    def test_paper_shapes_and_parameter_count(self):
        # ConvCaps1 (K=3, stride 2): 14 -> 6; ConvCaps2 (K=3, stride 1):
        # 6 -> 4; 3*3*32*32*16 transforms plus beta_v and beta_a.
        conv1 = EMConvCaps(num_capsules=32, kernel_size=3, strides=2)
        shapes = conv1.compute_output_shape(
            [(None, 14, 14, 32, 4, 4), (None, 14, 14, 32)]
        )
        self.assertEqual(shapes, [(None, 6, 6, 32, 4, 4), (None, 6, 6, 32)])
        conv2 = EMConvCaps(num_capsules=32, kernel_size=3, strides=1)
        conv2.build(shapes)
        self.assertEqual(conv2.count_params(), 147_456 + 64)
        self.assertEqual(
            conv2.compute_output_shape(shapes),
            [(None, 4, 4, 32, 4, 4), (None, 4, 4, 32)],
        )

    @parameterized.named_parameters(
        ("window", "window"),
        ("official", "official"),
        ("all_parents", "all_parents"),
        ("reference", "reference"),
    )
    def test_votes_and_routing_match_numpy(self, normalization):
        inputs = _capsules((2, 5, 5, 3), seed=1)
        layer = EMConvCaps(
            num_capsules=2,
            kernel_size=3,
            strides=2,
            routing_normalization=normalization,
            beta_a_initializer="random_uniform",
        )
        poses, activations = layer(inputs)
        kernel = keras.ops.convert_to_numpy(layer.kernel)
        votes = references.em_conv_votes(inputs[0], kernel, 3, 2)
        expected = capsule_ops.em_conv_routing(
            votes.astype("float32"),
            inputs[1],
            layer.beta_v,
            layer.beta_a,
            kernel_size=3,
            strides=2,
            routing_iterations=layer.routing_iterations,
            final_lambda=layer.final_lambda,
            routing_mode=layer.routing_mode,
            routing_normalization=layer.routing_normalization,
        )
        self.assertAllClose(
            poses,
            keras.ops.reshape(expected[0], (2, 2, 2, 2, 4, 4)),
            atol=1e-5,
        )
        self.assertAllClose(activations, expected[1], atol=1e-6)

    @parameterized.named_parameters(("k3_s2", 5, 2), ("k3_s1", 4, 1))
    def test_official_options_match_the_op(self, grid, strides):
        # `EMConvCaps(**OFFICIAL_EM_OPTIONS)` routes its votes as
        # `em_conv_routing(..., **OFFICIAL_EM_OPTIONS)` does.
        inputs = _capsules((2, grid, grid, 3), seed=7)
        options = capsule_ops.OFFICIAL_EM_OPTIONS
        layer = EMConvCaps(
            num_capsules=2,
            kernel_size=3,
            strides=strides,
            beta_v_initializer="random_uniform",
            beta_a_initializer="random_uniform",
            **options,
        )
        for name, value in options.items():
            self.assertEqual(getattr(layer, name), value, msg=name)
        poses, activations = layer(inputs)
        kernel = keras.ops.convert_to_numpy(layer.kernel)
        votes = references.em_conv_votes(inputs[0], kernel, 3, strides)
        expected = capsule_ops.em_conv_routing(
            votes.astype("float32"),
            inputs[1],
            layer.beta_v,
            layer.beta_a,
            kernel_size=3,
            strides=strides,
            **options,
        )
        out = expected[1].shape[1]
        self.assertAllClose(
            poses,
            keras.ops.reshape(expected[0], (2, out, out, 2, 4, 4)),
            atol=1e-5,
        )
        self.assertAllClose(activations, expected[1], atol=1e-6)

    @backend_marks.COMPILED
    def test_degenerate_inputs_train_finitely(self):
        # Identical poses with a ones kernel make identical votes (zero
        # variance); the second example has no active input capsule; the
        # third has poses of magnitude 1e4.
        poses = np.stack(
            [
                np.ones((4, 4, 2, 4, 4)),
                np.random.default_rng(2).normal(size=(4, 4, 2, 4, 4)),
                1e4 * np.random.default_rng(3).normal(size=(4, 4, 2, 4, 4)),
            ]
        ).astype("float32")
        activations = np.stack(
            [np.ones((4, 4, 2)), np.zeros((4, 4, 2)), np.ones((4, 4, 2))]
        ).astype("float32")
        _fit_one_step(
            self,
            EMConvCaps(num_capsules=2, kernel_initializer="ones"),
            [poses, activations],
        )

    @backend_marks.COMPILED
    def test_mixed_precision(self):
        # Routing maths in float32, outputs in the compute dtype, finite
        # values and a finite training step, including 1e4 poses and
        # inactive inputs.
        inputs = _capsules((3, 4, 4, 2), seed=4)
        inputs[0][2] *= 1e4
        inputs[1][1] = 0.0
        for policy in ("mixed_float16", "mixed_bfloat16"):
            keras.config.set_dtype_policy(policy)
            self.addCleanup(keras.config.set_dtype_policy, "float32")
            outputs = _fit_one_step(self, EMConvCaps(num_capsules=2), inputs)
            for value in outputs:
                self.assertEqual(
                    keras.backend.standardize_dtype(value.dtype),
                    policy.split("_")[1],
                )
        keras.config.set_dtype_policy("float32")

    def test_routing_options_are_kept_and_read_only(self):
        layer = EMConvCaps(
            num_capsules=2,
            routing_iterations=3,
            final_lambda=0.01,
            min_variance=1e-4,
            routing_mode="official",
            epsilon=1e-5,
        )
        self.assertEqual(
            (
                layer.routing_iterations,
                layer.final_lambda,
                layer.min_variance,
                layer.routing_mode,
                layer.epsilon,
            ),
            (3, 0.01, 1e-4, "official", 1e-5),
        )
        self.assertEqual(layer.get_config()["epsilon"], 1e-5)
        # A variant is a new layer from the config, not a changed one.
        for name in (
            "routing_iterations",
            "final_lambda",
            "routing_mode",
            "epsilon",
        ):
            with self.assertRaises(AttributeError):
                setattr(layer, name, 2)
        variant = EMConvCaps.from_config(
            {**layer.get_config(), "routing_iterations": 2}
        )
        self.assertEqual(variant.routing_iterations, 2)
        self.assertEqual(variant.routing_mode, "official")

    def test_errors(self):
        with self.assertRaisesRegex(
            ValueError, r"positive integer.*Received: routing_iterations=0"
        ):
            EMConvCaps(num_capsules=2, routing_iterations=0)
        with self.assertRaisesRegex(
            ValueError, r"routing_mode must be .*Received: routing_mode=em"
        ):
            EMConvCaps(num_capsules=2, routing_mode="em")
        with self.assertRaisesRegex(
            ValueError,
            r"routing_normalization must be .*"
            r"Received: routing_normalization=type",
        ):
            EMConvCaps(num_capsules=2, routing_normalization="type")
        with self.assertRaisesRegex(
            ValueError, r"positive number.*Received: final_lambda=0"
        ):
            EMConvCaps(num_capsules=2, final_lambda=0)
        with self.assertRaisesRegex(
            ValueError, r"positive number.*Received: epsilon=0"
        ):
            EMConvCaps(num_capsules=2, epsilon=0)
        with self.assertRaisesRegex(
            ValueError, r"positive number.*Received: epsilon=tiny"
        ):
            EMConvCaps(num_capsules=2, epsilon="tiny")
        with self.assertRaisesRegex(
            ValueError, r"padding must be .*Received: padding=full"
        ):
            EMConvCaps(num_capsules=2, padding="full")
        layer = EMConvCaps(num_capsules=2)
        with self.assertRaisesRegex(
            ValueError, r"expects a list \[poses, activations\].*Received"
        ):
            layer.build((None, 5, 5, 3, 4, 4))
        with self.assertRaisesRegex(
            ValueError, r"expects a list.*Received: input_shape"
        ):
            layer.build([(None, 5, 5, 3, 4, 4), (None, 5, 5, 2)])
        with self.assertRaisesRegex(
            ValueError, r"square pose matrices.*Received: input_shape"
        ):
            layer.build([(None, 5, 5, 3, 4, 2), (None, 5, 5, 3)])
        with self.assertRaisesRegex(
            ValueError, r"no output positions.*Received: kernel_size"
        ):
            layer.build([(None, 2, 2, 3, 4, 4), (None, 2, 2, 3)])


def _fit_one_step(test, layer, inputs):
    """Fits a one-layer model for one step; weights must stay finite."""
    symbolic = [keras.Input(x.shape[1:]) for x in inputs]
    model = keras.Model(symbolic, layer(symbolic))
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss=["mse", "mse"])
    outputs = model.predict(inputs, verbose=0)
    test.assertAllFinite(outputs)
    history = model.fit(
        inputs, [np.zeros_like(o) for o in outputs], epochs=1, verbose=0
    )
    test.assertTrue(np.isfinite(history.history["loss"][-1]))
    test.assertAllFinite(model.weights)
    return outputs
