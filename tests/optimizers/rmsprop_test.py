import keras
import numpy as np
from absl.testing import parameterized
from keras import ops

from keras_capsules.optimizers import RMSprop
from keras_capsules.testing import TestCase


def _tf1_rmsprop(w, gradients, lr, rho, momentum, epsilon):
    """tf.train.RMSPropOptimizer's ApplyRMSProp, with its slots started at
    ms = 1 and mom = 0."""
    ms, mom = np.ones_like(w), np.zeros_like(w)
    for g in gradients:
        ms = ms + (g * g - ms) * (1 - rho)
        mom = momentum * mom + lr * g / np.sqrt(ms + epsilon)
        w = w - mom
    return w


class RMSpropTest(TestCase):
    def test_matches_tensorflow_1_with_a_velocity_started_at_one(self):
        rng = np.random.default_rng(0)
        w0 = rng.standard_normal((3, 4))
        gradients = [rng.standard_normal((3, 4)) * 1e-2 for _ in range(5)]
        variable = keras.Variable(w0.astype("float32"))
        optimizer = RMSprop(
            0.1, momentum=0.9, epsilon=1e-2 / 128**2, initial_velocity=1.0
        )
        for g in gradients:
            gradient = ops.convert_to_tensor(g.astype("float32"))
            optimizer.apply_gradients([(gradient, variable)])
        expected = _tf1_rmsprop(w0, gradients, 0.1, 0.9, 0.9, 1e-2 / 128**2)
        self.assertAllClose(variable, expected, atol=1e-5, rtol=1e-5)

    @parameterized.named_parameters(("compiled", True), ("not_compiled", False))
    def test_velocity_starts_at_its_initial_value_inside_fit(self, jit):
        # Keras builds the optimizer inside the first traced train step on
        # TensorFlow: the velocities must hold their start there too.
        if keras.backend.backend() == "torch" and jit:
            self.skipTest("PyTorch trains eagerly in fit (jit_compile=False)")
        rng = np.random.default_rng(2)
        x = rng.standard_normal((8, 3)).astype("float32")
        y = rng.standard_normal((8, 2)).astype("float32")
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        kernel, bias = [ops.convert_to_numpy(w) for w in model.weights]
        rho = 0.9
        model.compile(
            optimizer=RMSprop(1e-3, rho=rho, initial_velocity=1.0),
            loss="mse",
            jit_compile=jit,
        )
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
        # The gradient of the mean squared error of the first step.
        error = 2 * (x @ kernel + bias - y) / y.size
        gradients = {"kernel": x.T @ error, "bias": error.sum(axis=0)}
        velocities = {
            name: ops.convert_to_numpy(v)
            for v in model.optimizer.variables
            for name in gradients
            if v.path.endswith(f"_{name}_velocity")
        }
        self.assertEqual(set(velocities), {"kernel", "bias"})
        for name, g in gradients.items():
            self.assertAllClose(
                velocities[name],
                rho + (1 - rho) * g.astype("float64") ** 2,
                atol=1e-6,
                msg=name,
            )

    def test_default_is_keras_rmsprop(self):
        rng = np.random.default_rng(1)
        w0 = rng.standard_normal(5).astype("float32")
        g = ops.convert_to_tensor(rng.standard_normal(5).astype("float32"))
        ours, theirs = keras.Variable(w0), keras.Variable(w0)
        RMSprop(0.01, momentum=0.5).apply_gradients([(g, ours)])
        keras.optimizers.RMSprop(0.01, momentum=0.5).apply_gradients(
            [(g, theirs)]
        )
        self.assertAllClose(ours, theirs)

    def test_config_round_trip(self):
        optimizer = RMSprop(3e-5, momentum=0.9, initial_velocity=1.0)
        config = keras.optimizers.serialize(optimizer)
        restored = keras.optimizers.deserialize(config)
        self.assertIsInstance(restored, RMSprop)
        self.assertEqual(restored.initial_velocity, 1.0)

    def test_rejects_a_negative_velocity(self):
        with self.assertRaisesRegex(ValueError, "initial_velocity"):
            RMSprop(initial_velocity=-1.0)
