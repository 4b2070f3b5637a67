"""The presence noise of the SCAE layers (`layers/_presence_noise.py`):
uniform in `[-noise_scale / 2, noise_scale / 2]` in the logits' dtype,
whatever dtype a backend draws it in
(`ops/_backend.draws_uniform_in_float64`)."""

import numpy as np
from absl.testing import parameterized
from keras import ops

from keras_capsules.layers import ObjectCapsuleDecoder
from keras_capsules.layers._presence_noise import presence_noise
from keras_capsules.testing import TestCase
from tests import backend_marks

pytestmark = backend_marks.EAGER


class PresenceNoiseTest(TestCase):
    @parameterized.named_parameters(
        ("float32", "float32"), ("float16", "float16"), ("bfloat16", "bfloat16")
    )
    def test_uniform_of_the_noise_scale_in_the_logits_dtype(self, dtype):
        layer = ObjectCapsuleDecoder(num_parts=40, noise_scale=4.0, seed=0)
        shape = (128, 32, 41)
        noise = presence_noise(layer, shape, dtype, training=True)
        self.assertEqual(ops.dtype(noise), dtype)
        values = ops.convert_to_numpy(ops.cast(noise, "float32"))
        self.assertEqual(values.shape, shape)
        self.assertAllFinite(values)
        self.assertLessEqual(np.abs(values).max(), 2.0)
        self.assertGreater(np.abs(values).max(), 1.99)
        # Mean 0 and variance 4^2 / 12 of 167,936 draws, within 5 standard
        # errors; every tenth of the range holds a tenth of them.
        self.assertLess(abs(values.mean()), 5 * np.sqrt(16 / 12 / values.size))
        self.assertAllClose(values.var(), 16 / 12, rtol=0.02)
        counts = np.histogram(values, bins=10, range=(-2, 2))[0]
        self.assertAllClose(counts / values.size, np.full(10, 0.1), atol=0.003)

    def test_draws_anew_in_training_and_once_with_a_seed(self):
        layer = ObjectCapsuleDecoder(num_parts=5, noise_scale=4.0, seed=0)
        first = presence_noise(layer, (8, 6), "float32", training=True)
        second = presence_noise(layer, (8, 6), "float32", training=True)
        self.assertGreater(
            np.abs(ops.convert_to_numpy(first - second)).max(), 0.1
        )
        self.assertIsNone(presence_noise(layer, (8, 6), "float32", False))
        seeded = ObjectCapsuleDecoder(
            num_parts=5, noise_scale=4.0, inference_noise_seed=3
        )
        self.assertAllClose(
            presence_noise(seeded, (8, 6), "float32", training=False),
            presence_noise(seeded, (8, 6), "float32", training=False),
            atol=0,
        )
