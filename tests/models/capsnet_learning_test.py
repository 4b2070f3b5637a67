"""Learning test: CapsNet learns real digits with its compile() defaults.

Trains a narrow CapsNet (the paper's layers, fewer filters and capsule
types) on 24x24 centre crops of the MNIST sample that ships with the
package, as the EM learning tests do, and checks the test accuracy is far
above chance (10 %).
"""

from keras_capsules.models import CapsNet
from keras_capsules.testing import TestCase
from tests.models.learning import accuracy_after_training

_BAR = 0.5


class CapsNetLearningTest(TestCase):
    def test_learns_mnist_with_compile_defaults(self):
        model = CapsNet(
            image_shape=(24, 24, 1),
            conv_filters=32,
            num_primary_capsules=8,
            decoder_units=(64, 128),
        )
        model.compile()
        accuracy = accuracy_after_training(self, model)
        self.assertGreater(accuracy, _BAR, msg=f"accuracy {accuracy:.3f}")
