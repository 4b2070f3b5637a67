import os

import keras
import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules import ops as capsule_ops
from keras_capsules.layers import EMClassCaps
from keras_capsules.layers import EMConvCaps
from keras_capsules.layers import PrimaryMatrixCaps
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references

pytestmark = backend_marks.EAGER


def _capsules(shape, seed=0):
    rng = np.random.default_rng(seed)
    return [
        rng.normal(size=shape + (4, 4)).astype("float32"),
        rng.uniform(size=shape).astype("float32"),
    ]


class EMClassCapsTest(TestCase):
    @backend_marks.COMPILED
    def test_layer_basics(self):
        self.run_layer_test(
            EMClassCaps,
            {"num_classes": 5, "coordinate_placement": "paper"},
            input_data=_capsules((2, 3, 3, 4)),
            expected_output_shape=[(2, 5, 4, 4), (2, 5)],
            expected_num_trainable_weights=3,
            expected_num_params=4 * 16 * 5 + 2 * 5,
        )

    @backend_marks.COMPILED
    def test_official_setting(self):
        # The option set of the ops splats into the layer unchanged.
        official = dict(capsule_ops.OFFICIAL_EM_CLASS_OPTIONS)
        self.assertEqual(
            official,
            {
                "routing_iterations": 3,
                "final_lambda": 0.0025,
                "min_variance": 5e-4,
                "epsilon": 1e-5,
                "routing_mode": "official",
            },
        )
        self.run_layer_test(
            EMClassCaps,
            {"num_classes": 5, **official},
            input_data=_capsules((2, 3, 3, 4)),
            expected_output_shape=[(2, 5, 4, 4), (2, 5)],
            expected_num_trainable_weights=3,
            expected_num_params=4 * 16 * 5 + 2 * 5,
        )
        layer = EMClassCaps(num_classes=5, **official)
        for name, value in official.items():
            self.assertEqual(getattr(layer, name), value, msg=name)
        self.assertEqual(layer.epsilon, 1e-5)
        self.assertEqual(EMClassCaps(num_classes=5).epsilon, None)
        self.assertEqual(
            EMClassCaps.from_config(layer.get_config()).epsilon, 1e-5
        )

    def test_paper_parameter_count(self):
        # B = 32 capsule types, 5 smallNORB classes: 32*16*5 + 2*5.
        layer = EMClassCaps(num_classes=5)
        layer.build([(None, 4, 4, 32, 4, 4), (None, 4, 4, 32)])
        self.assertEqual(layer.count_params(), 2_570)

    @parameterized.named_parameters(
        ("official_placement", True, "official", None, "official"),
        ("paper_placement_scaled", True, "paper", 0.08, "official"),
        ("no_coordinates_paper_mode", False, None, None, "paper"),
    )
    def test_matches_numpy_votes(self, addition, placement, scale, mode):
        inputs = _capsules((2, 3, 3, 4), seed=1)
        kwargs = {
            "num_classes": 3,
            "coordinate_addition": addition,
            "coordinate_scale": scale,
            "routing_mode": mode,
            "kernel_initializer": "random_normal",
        }
        if placement is not None:
            kwargs["coordinate_placement"] = placement
        layer = EMClassCaps(**kwargs)
        poses, activations = layer(inputs)
        votes = references.em_class_votes(
            inputs[0],
            keras.ops.convert_to_numpy(layer.kernel),
            placement if addition else None,
            scale,
        )
        expected = capsule_ops.em_routing(
            votes.astype("float32"),
            inputs[1].reshape(2, 36),
            layer.beta_v,
            layer.beta_a,
            routing_iterations=layer.routing_iterations,
            final_lambda=layer.final_lambda,
            routing_mode=mode,
        )
        self.assertAllClose(
            poses, keras.ops.reshape(expected[0], (2, 3, 4, 4)), atol=1e-5
        )
        self.assertAllClose(activations, expected[1], atol=1e-6)

    @parameterized.named_parameters(
        ("no_coordinates", False), ("coordinates", True)
    )
    def test_official_options_match_the_op(self, addition):
        # `EMClassCaps(**OFFICIAL_EM_CLASS_OPTIONS)` routes its votes as
        # `em_routing(..., **OFFICIAL_EM_CLASS_OPTIONS)` does.
        inputs = _capsules((2, 3, 3, 4), seed=6)
        options = capsule_ops.OFFICIAL_EM_CLASS_OPTIONS
        layer = EMClassCaps(
            num_classes=3,
            coordinate_addition=addition,
            kernel_initializer="random_normal",
            beta_v_initializer="random_uniform",
            beta_a_initializer="random_uniform",
            **options,
        )
        poses, activations = layer(inputs)
        votes = references.em_class_votes(
            inputs[0],
            keras.ops.convert_to_numpy(layer.kernel),
            "official" if addition else None,
            None,
        )
        expected = capsule_ops.em_routing(
            votes.astype("float32"),
            inputs[1].reshape(2, 36),
            layer.beta_v,
            layer.beta_a,
            **options,
        )
        self.assertAllClose(
            poses, keras.ops.reshape(expected[0], (2, 3, 4, 4)), atol=1e-5
        )
        self.assertAllClose(activations, expected[1], atol=1e-6)
        # The check has teeth: the defaults route differently.
        defaults = capsule_ops.em_routing(
            votes.astype("float32"),
            inputs[1].reshape(2, 36),
            layer.beta_v,
            layer.beta_a,
        )
        self.assertGreater(
            np.max(
                np.abs(
                    keras.ops.convert_to_numpy(defaults[1])
                    - keras.ops.convert_to_numpy(expected[1])
                )
            ),
            1e-4,
        )

    @backend_marks.COMPILED
    def test_degenerate_inputs_train_finitely(self):
        # Identical poses with a ones kernel and no coordinates make
        # identical votes; then no active input; then poses of size 1e4.
        poses = np.stack(
            [
                np.ones((2, 2, 3, 4, 4)),
                np.random.default_rng(2).normal(size=(2, 2, 3, 4, 4)),
                1e4 * np.random.default_rng(3).normal(size=(2, 2, 3, 4, 4)),
            ]
        ).astype("float32")
        activations = np.stack(
            [np.ones((2, 2, 3)), np.zeros((2, 2, 3)), np.ones((2, 2, 3))]
        ).astype("float32")
        outputs = _fit_one_step(
            self,
            EMClassCaps(
                num_classes=2,
                coordinate_addition=False,
                kernel_initializer="ones",
            ),
            [poses, activations],
        )
        # Identical votes: each class pose is the common vote (4 per entry
        # with a ones kernel and ones poses; the default paper M-step has
        # no momentum on the mean).
        self.assertAllClose(outputs[0][0], np.full((2, 4, 4), 4.0), atol=1e-4)

    @backend_marks.COMPILED
    def test_mixed_precision(self):
        inputs = _capsules((3, 2, 2, 3), seed=4)
        inputs[0][2] *= 1e4
        inputs[1][1] = 0.0
        for policy in ("mixed_float16", "mixed_bfloat16"):
            keras.config.set_dtype_policy(policy)
            self.addCleanup(keras.config.set_dtype_policy, "float32")
            outputs = _fit_one_step(self, EMClassCaps(num_classes=2), inputs)
            for value in outputs:
                self.assertEqual(
                    keras.backend.standardize_dtype(value.dtype),
                    policy.split("_")[1],
                )
        keras.config.set_dtype_policy("float32")

    @pytest.mark.primary_backend
    @backend_marks.COMPILED
    def test_matrix_capsule_network_compiles_fits_and_reloads(self):
        # Conv2D -> PrimaryMatrixCaps -> EMConvCaps -> EMClassCaps, the
        # paper's stack at toy size, jit-compiled where the backend can.
        images = keras.Input((6, 6, 1))
        features = keras.layers.Conv2D(4, 3, activation="relu")(images)
        capsules = PrimaryMatrixCaps(num_capsules=2)(features)
        capsules = EMConvCaps(num_capsules=2, kernel_size=3)(capsules)
        _, probabilities = EMClassCaps(num_classes=3)(capsules)
        model = keras.Model(images, probabilities)
        jit = keras.backend.backend() in ("tensorflow", "jax")
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss="mse",
            jit_compile=True if jit else "auto",
        )
        rng = np.random.default_rng(5)
        x = rng.uniform(size=(4, 6, 6, 1)).astype("float32")
        y = np.eye(3, dtype="float32")[[0, 1, 2, 0]]
        before = [keras.ops.convert_to_numpy(w) for w in model.weights]
        history = model.fit(x, y, batch_size=4, epochs=2, verbose=0)
        self.assertTrue(np.all(np.isfinite(history.history["loss"])))
        self.assertAllFinite(model.weights)
        changed = [
            not np.allclose(b, keras.ops.convert_to_numpy(w))
            for b, w in zip(before, model.weights)
        ]
        self.assertTrue(all(changed), "every weight should be trained")

        expected = model.predict(x, verbose=0)
        path = os.path.join(self.get_temp_dir(), "matrix_capsnet.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
        self.assertIsInstance(loaded.layers[-1], EMClassCaps)
        self.assertAllClose(loaded.predict(x, verbose=0), expected, atol=1e-6)

    def test_lambda_scale_is_an_unknown_argument(self):
        # The deprecated `lambda_scale` is gone: it fails as any unknown
        # keyword argument of a Keras layer does.
        config = EMClassCaps(num_classes=3, final_lambda=0.01).get_config()
        self.assertNotIn("lambda_scale", config)
        with self.assertRaisesRegex(
            ValueError, r"Unrecognized keyword arguments.*lambda_scale"
        ):
            EMClassCaps(num_classes=3, lambda_scale=0.25)
        with self.assertRaisesRegex(
            (TypeError, ValueError),
            r"Unrecognized keyword arguments.*lambda_scale",
        ):
            EMClassCaps.from_config({**config, "lambda_scale": 0.25})

    def test_errors(self):
        with self.assertRaisesRegex(
            ValueError, r"positive integer.*Received: num_classes=0"
        ):
            EMClassCaps(num_classes=0)
        with self.assertRaisesRegex(
            ValueError,
            r"coordinate_placement must be .*"
            r"Received: coordinate_placement=center$",
        ):
            EMClassCaps(num_classes=2, coordinate_placement="center")
        with self.assertRaisesRegex(
            TypeError, r"boolean.*Received: coordinate_addition=yes"
        ):
            EMClassCaps(num_classes=2, coordinate_addition="yes")
        with self.assertRaisesRegex(
            ValueError, r"positive integer.*Received: routing_iterations=0$"
        ):
            EMClassCaps(num_classes=2, routing_iterations=0)
        with self.assertRaisesRegex(
            ValueError, r"routing_mode must be .*Received: routing_mode=em$"
        ):
            EMClassCaps(num_classes=2, routing_mode="em")
        with self.assertRaisesRegex(
            ValueError, r"positive number.*Received: coordinate_scale=0"
        ):
            EMClassCaps(num_classes=2, coordinate_scale=0)
        with self.assertRaisesRegex(
            ValueError, r"positive number.*Received: epsilon=-1"
        ):
            EMClassCaps(num_classes=2, epsilon=-1)
        layer = EMClassCaps(num_classes=2)
        with self.assertRaisesRegex(
            ValueError, r"expects a list.*Received: input_shape"
        ):
            layer.build([(None, 3, 3, 4, 4), (None, 3, 3, 4)])
        with self.assertRaisesRegex(
            ValueError, r"at least 2x2.*Received: input_shape"
        ):
            layer.build([(None, 3, 3, 4, 1, 1), (None, 3, 3, 4)])


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
