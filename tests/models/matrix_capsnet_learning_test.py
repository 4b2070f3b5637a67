"""Learning tests: the EM networks learn real digits with their defaults.

A model that does not learn is a bug however fast and finite it is, so
these train on the MNIST sample that ships with the package for a fixed
number of steps and check the test accuracy is far above chance (10 %).
The images are 24x24 centre crops (MNIST's digits sit in the middle
20x20), which keeps each model's run under a minute per backend. After
50 steps (1,600 images) these two tests and CapsNet's scored 73-85 % on
TensorFlow, JAX and PyTorch (79-88 % after 80 steps). With the
EM defaults before the window normalisation (all-parents E-step, three
iterations, the official M-step) both models scored 10.6 % here on
TensorFlow; with the defaults they pass on every backend.
"""

import keras

from keras_capsules.layers import EMClassCaps
from keras_capsules.layers import EMConvCaps
from keras_capsules.layers import PrimaryMatrixCaps
from keras_capsules.losses import SpreadLoss
from keras_capsules.models import MatrixCapsNet
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests.models.learning import accuracy_after_training

_BAR = 0.5


def _jit():
    return keras.backend.backend() != "torch"


class MatrixCapsNetLearningTest(TestCase):
    def test_learns_mnist_with_compile_defaults(self):
        keras.utils.set_random_seed(0)
        model = MatrixCapsNet(
            image_shape=(24, 24, 1), num_classes=10, A=32, B=8, C=8, D=8
        )
        model.compile()
        accuracy = accuracy_after_training(self, model)
        self.assertGreater(accuracy, _BAR, msg=f"accuracy {accuracy}")

    @backend_marks.RUN_ONCE
    def test_functional_model_with_layer_defaults_learns_mnist(self):
        keras.utils.set_random_seed(0)
        images = keras.Input((24, 24, 1))
        features = keras.layers.Conv2D(32, 5, strides=2, activation="relu")(
            images
        )
        capsules = PrimaryMatrixCaps(8)(features)
        capsules = EMConvCaps(8, 3, strides=2)(capsules)
        capsules = EMConvCaps(8, 3, strides=1)(capsules)
        _, activations = EMClassCaps(10)(capsules)
        model = keras.Model(images, activations)
        model.compile(
            optimizer=keras.optimizers.Adam(0.01),
            loss=SpreadLoss(),
            jit_compile=_jit(),
        )
        accuracy = accuracy_after_training(self, model)
        self.assertGreater(accuracy, _BAR, msg=f"accuracy {accuracy}")
