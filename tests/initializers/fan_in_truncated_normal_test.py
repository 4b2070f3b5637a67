import math

import keras
import numpy as np
from keras import ops

from keras_capsules.initializers import FanInTruncatedNormal
from keras_capsules.models import StackedCapsuleAutoencoder
from keras_capsules.testing import TestCase
from tests.layers import scae_cases

# The standard deviation of a unit normal truncated at two.
_TRUNCATED_STD = 0.87962566103423978


def _official_fan_ins():
    """`(shape, fan-in)` of every kernel of the official MNIST model, from
    docs/design/scae_official_variables.md: Sonnet's `Linear` and `Conv2D`
    take all axes but the last; the object decoder's `BatchLinear` kernels
    `(1, capsules, inputs, units)` take `inputs`."""
    found = []
    for module, shapes in scae_cases.OFFICIAL_SHAPES.items():
        if module == "object_decoder":
            # The kernels of the two BatchMLPs; the others are biases,
            # the static relations and `dummy_vote`.
            found += [(shapes[i][1:], shapes[i][-2]) for i in (0, 2, 4, 6)]
            continue
        found += [
            (shape, math.prod(shape[:-1]))
            for shape in shapes
            if len(shape) == 2 or len(shape) == 4
        ]
    return found


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
            self.assertLessEqual(np.abs(values).max(), 2 * std)
            self.assertAllClose(values.std(), _TRUNCATED_STD * std, rtol=0.02)
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

    def test_every_kernel_of_the_official_model_as_the_official_code(self):
        # The same kernels, and each drawn with the official fan-in.
        model = StackedCapsuleAutoencoder.from_preset("scae_mnist")
        drawn = []
        for weight in model.weights:
            name = weight.path.split("/")[-1]
            if not name.endswith("kernel"):
                continue
            shape = tuple(weight.shape)
            if weight.path.startswith("object_decoder/"):
                fan_in = shape[-2]
            else:
                fan_in = math.prod(shape[:-1])
            drawn.append((shape, fan_in))
            values = ops.convert_to_numpy(weight)
            std = 1 / math.sqrt(fan_in)
            self.assertLessEqual(np.abs(values).max(), 2 * std, weight.path)
            tolerance = 0.05 if values.size >= 4000 else 0.25
            self.assertAllClose(
                values.std(),
                _TRUNCATED_STD * std,
                rtol=tolerance,
                msg=weight.path,
            )
        self.assertEqual(sorted(drawn), sorted(_official_fan_ins()))
