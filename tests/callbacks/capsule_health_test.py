import keras
import numpy as np

from keras_capsules.callbacks import CapsuleHealth
from keras_capsules.layers import EMClassCaps
from keras_capsules.layers import EMConvCaps
from keras_capsules.layers import PrimaryMatrixCaps
from keras_capsules.testing import TestCase
from tests import non_finite


def _capsule_model():
    images = keras.Input((9, 9, 1))
    features = keras.layers.Conv2D(4, 3, activation="relu", name="conv")(images)
    capsules = PrimaryMatrixCaps(2, name="primary")(features)
    capsules = EMConvCaps(2, routing_iterations=1, name="conv_caps")(capsules)
    _, activations = EMClassCaps(3, routing_iterations=1, name="class_caps")(
        capsules
    )
    model = keras.Model(images, activations)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


class CapsuleHealthTest(TestCase):
    def test_logs_statistics_that_match_the_layers(self):
        rng = np.random.default_rng(0)
        x = rng.uniform(size=(8, 9, 9, 1)).astype("float32")
        y = np.eye(3, dtype="float32")[np.arange(8) % 3]
        model = _capsule_model()
        health = CapsuleHealth(x[:4], every_n_epochs=2)
        history = model.fit(
            x, y, epochs=4, batch_size=4, callbacks=[health], verbose=0
        ).history

        for name in ("primary", "conv_caps", "class_caps"):
            self.assertLen(history[f"{name}/activation_mean"], 2)
        self.assertNotIn("primary/pose_rms_to_floor", history)
        self.assertNotIn("conv/activation_mean", history)
        self.assertGreater(history["conv_caps/kernel/update_rms"][-1], 0.0)

        # The last logged values are those of the trained model.
        probe = keras.Model(model.inputs, model.get_layer("class_caps").output)
        poses, activations = probe.predict(x[:4], verbose=0)
        self.assertAllClose(
            history["class_caps/activation_mean"][-1],
            activations.mean(),
            atol=1e-6,
        )
        self.assertAllClose(
            history["class_caps/activation_spread"][-1],
            activations.std(axis=0).mean(),
            atol=1e-6,
        )
        rms = np.sqrt(np.mean(np.square(poses)))
        self.assertAllClose(history["class_caps/pose_rms"][-1], rms, atol=1e-6)
        self.assertAllClose(
            history["class_caps/pose_rms_to_floor"][-1],
            rms / np.sqrt(5e-4),
            rtol=1e-5,
        )
        # A frozen weight does not move.
        self.assertEqual(health.statistics()["conv_caps/kernel/update_rms"], 0)

    def test_config_round_trip(self):
        images = np.arange(8, dtype="float32").reshape(2, 2, 2, 1)
        health = CapsuleHealth(images, every_n_epochs=3, batch_size=5)
        restored = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(health)
        )
        self.assertIsInstance(restored, CapsuleHealth)
        self.assertEqual(restored.every_n_epochs, 3)
        self.assertEqual(restored.batch_size, 5)
        self.assertAllClose(restored.images, images)

    def test_errors(self):
        with self.assertRaisesRegex(
            ValueError, r"every_n_epochs must be a positive integer.*Received"
        ):
            CapsuleHealth(np.zeros((1, 9, 9, 1)), every_n_epochs=0)
        inputs = keras.Input((3,))
        model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
        model.compile(optimizer="sgd", loss="mse")
        with self.assertRaisesRegex(
            ValueError, r"no PrimaryMatrixCaps.*Received: model="
        ):
            model.fit(
                np.zeros((2, 3)),
                np.zeros((2, 2)),
                callbacks=[CapsuleHealth(np.zeros((1, 3)))],
                verbose=0,
            )

    def test_rejects_non_finite_images(self):
        images = np.random.default_rng(0).uniform(size=(4, 9, 9, 1))
        for case, bad in non_finite.non_finite_images(images).items():
            with self.subTest(case=case):
                with self.assertRaisesRegex(
                    ValueError,
                    r"Argument images must hold finite values.*Received: "
                    r"images" + non_finite.RECEIVED[case],
                ):
                    CapsuleHealth(bad)
        # Any finite range is a probe batch: the model decides its inputs.
        health = CapsuleHealth(images * 255.0)
        self.assertAllClose(health.images, images * 255.0)
