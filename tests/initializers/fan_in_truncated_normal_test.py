import math

import keras
import numpy as np
from keras import ops

from keras_capsules.initializers import FanInTruncatedNormal
from keras_capsules.testing import TestCase
from tests.layers import scae_cases


class FanInTruncatedNormalTest(TestCase):
    def test_draws_a_truncated_normal_of_the_fan_in(self):
        for shape, fan_in, initializer in (
            ((400, 300), 400, FanInTruncatedNormal()),
            ((3, 3, 16, 200), 144, FanInTruncatedNormal(seed=1)),
            ((20, 50, 300), 50, FanInTruncatedNormal(fan_in=50, seed=2)),
        ):
            values = ops.convert_to_numpy(initializer(shape))
            self.assertEqual(values.shape, shape)
            std = 1 / math.sqrt(fan_in)
            # Truncated at two standard deviations (Keras's PyTorch draw
            # keeps one of four normals inside, so about 4e-6 of its values
            # lie beyond).
            self.assertLess(np.mean(np.abs(values) > 2 * std), 1e-4)
            self.assertAllClose(
                values.std(), scae_cases.TRUNCATED_STD * std, rtol=0.02
            )
            self.assertAllClose(values.mean(), 0.0, atol=0.01 * std)

    def test_seeded_and_serializable(self):
        initializer = FanInTruncatedNormal(fan_in=7, seed=3)
        config = keras.initializers.serialize(initializer)
        restored = keras.initializers.deserialize(config)
        self.assertIsInstance(restored, FanInTruncatedNormal)
        self.assertEqual(restored.get_config(), initializer.get_config())
        self.assertEqual(restored.get_config()["fan_in"], 7)
        self.assertAllClose(restored((4, 5)), initializer((4, 5)))
        with self.assertRaisesRegex(ValueError, "fan_in"):
            FanInTruncatedNormal(fan_in=0)
