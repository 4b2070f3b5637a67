"""Learning test: the Stacked Capsule Autoencoder learns on real digits.

A small network of the official design (16 parts, 10 objects) on the
28x28 digits of the embedded MNIST sample, trained for 100 steps of 32
images with Adam at 1e-3 (the official learning rate, 3e-5, moves it too
little in a CI-sized run). On 500 test digits the part autoencoder's
image log-likelihood must rise by more than 3 nats (7 to 14 seen, by
backend), and the trained posterior probe's cross-entropy must be lower
by more than 0.1 than that of the same probe reset to its initial
weights, on the same trained features (0.66 to 1.08 seen). The probe is
compared with its own initialisation on the final features because the
features move under it while it learns: compared with the untrained
model, its cross-entropy fell on JAX and PyTorch but rose on TensorFlow.
The probe's accuracy is still near chance after so few steps.
"""

import keras
import numpy as np

from keras_capsules.datasets import mnist
from keras_capsules.models import StackedCapsuleAutoencoder
from keras_capsules.testing import TestCase

_STEPS = 100
_BATCH = 32


def _scores(model, x, y):
    out = model.predict(x, batch_size=100, verbose=0)
    xe = keras.losses.sparse_categorical_crossentropy(
        y, out["posterior_logits"], from_logits=True
    )
    return float(np.mean(out["image_log_likelihood"])), float(
        np.mean(keras.ops.convert_to_numpy(xe))
    )


class StackedCapsuleAutoencoderLearningTest(TestCase):
    def test_reconstruction_and_probe_improve(self):
        keras.utils.set_random_seed(0)
        x, y = mnist.load_sample("train")
        x_test, y_test = mnist.load_sample("test")
        x, y = x[: _STEPS * _BATCH], y[: _STEPS * _BATCH].argmax(-1)
        x_test, y_test = x_test[:500], y_test[:500].argmax(-1)
        model = StackedCapsuleAutoencoder(
            image_shape=(28, 28, 1),
            num_parts=16,
            num_object_capsules=10,
            object_capsule_dim=32,
            seed=0,
        )
        model.compile(optimizer=keras.optimizers.Adam(1e-3))
        likelihood_before, _ = _scores(model, x_test, y_test)
        initial_probe = model.posterior_probe.get_weights()
        model.fit(x, y, batch_size=_BATCH, epochs=1, shuffle=False, verbose=0)
        likelihood_after, probe_after = _scores(model, x_test, y_test)
        # The probe against its own initialisation, on the same trained
        # features: the features move under the probe while it learns.
        model.posterior_probe.set_weights(initial_probe)
        _, probe_before = _scores(model, x_test, y_test)
        self.assertGreater(likelihood_after, likelihood_before + 3.0)
        self.assertLess(probe_after, probe_before - 0.1)
