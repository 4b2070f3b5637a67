"""Learning test: EfficientCapsNet learns real digits with its defaults.

The MNIST network of the paper with a 7x7 primary window, for the 24x24
centre crops of the embedded sample that the other learning tests use,
trained with `compile()`'s defaults for the same 50 steps of 32 images;
the test accuracy must be far above chance (10 %).
"""

import keras

from keras_capsules.models import EfficientCapsNet
from keras_capsules.testing import TestCase
from tests.models.learning import accuracy_after_training

_BAR = 0.5


class EfficientCapsNetLearningTest(TestCase):
    def test_learns_mnist_with_compile_defaults(self):
        keras.utils.set_random_seed(0)
        model = EfficientCapsNet(image_shape=(24, 24, 1), primary_kernel_size=7)
        model.compile()
        accuracy = accuracy_after_training(self, model)
        self.assertGreater(accuracy, _BAR, msg=f"accuracy {accuracy:.3f}")
