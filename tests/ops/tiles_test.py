import keras
import numpy as np
from absl.testing import parameterized

from keras_capsules.ops import _tiles
from keras_capsules.testing import TestCase
from tests import backend_marks

pytestmark = backend_marks.EAGER


class PadTest(TestCase):
    @parameterized.named_parameters(
        ("zeros_two_axes", ((0, 0), (1, 2), (0, 3)), 0.0),
        ("fill_value_one_side", ((2, 0), (0, 0), (0, 1)), -7.5),
        ("no_padding", ((0, 0), (0, 0), (0, 0)), 0.0),
    )
    def test_matches_numpy_pad(self, pad_width, value):
        x = np.arange(24, dtype="float32").reshape(2, 3, 4)
        result = _tiles.pad(x, pad_width, constant_values=value)
        self.assertAllClose(
            result, np.pad(x, pad_width, constant_values=value), atol=0
        )
        self.assertEqual(
            keras.backend.standardize_dtype(result.dtype), "float32"
        )

    def test_symbolic_shape(self):
        x = keras.KerasTensor((None, 3, 4))
        result = _tiles.pad(x, ((0, 0), (1, 1), (2, 0)))
        self.assertEqual(tuple(result.shape), (None, 5, 6))

    def test_creates_no_keras_operation(self):
        # `keras.ops.pad` names a new Operation on every call, which made
        # torch.compile retrace the routing at every step; the helper
        # must not on PyTorch.
        before = keras.backend.get_uid("pad")
        _tiles.pad(np.zeros((1, 2), "float32"), ((1, 1), (0, 0)))
        created = keras.backend.get_uid("pad") - before - 1
        if keras.backend.backend() == "torch":
            self.assertEqual(created, 0)
        else:
            self.assertEqual(created, 1)
