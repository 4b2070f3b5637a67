import keras

from keras_capsules import models
from keras_capsules.ops._tiles import tiling
from keras_capsules.ops.em import _vote_layouts
from keras_capsules.testing import TestCase

_XLA = keras.backend.backend() in ("tensorflow", "jax")


class BackendTest(TestCase):
    def test_vote_layout(self):
        geometry = tiling((6, 6), (3, 3), (2, 2), "valid")
        layout = _vote_layouts.vote_layout(geometry, 4)
        expected = (
            _vote_layouts.ChildrenFirst
            if _XLA
            else _vote_layouts.PositionsFirst
        )
        self.assertIsInstance(layout, expected)
        self.assertEqual(layout.num_children, 36)

    def test_models_compile_with_xla_by_default(self):
        # Keras' "auto" leaves TensorFlow without XLA on a machine without
        # a GPU; the models' compile() turns it on where XLA compiles.
        model = models.MatrixCapsNet.from_preset(
            "tiny", image_shape=(28, 28, 1), num_classes=10
        )
        model.compile()
        self.assertEqual(model.jit_compile, True if _XLA else False)
        model.compile(jit_compile=False)
        self.assertFalse(model.jit_compile)
        capsnet = models.CapsNet(
            image_shape=(28, 28, 1), num_classes=10, decoder_units=None
        )
        capsnet.compile()
        self.assertEqual(capsnet.jit_compile, True if _XLA else False)
