import numpy as np
from absl.testing import parameterized

import keras_capsules
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references

pytestmark = backend_marks.EAGER


class Conv2DTest(TestCase):
    @parameterized.named_parameters(
        ("k9_s2_valid", (2, 20, 20, 3), 9, (2, 2), "valid"),
        ("k3_s2_odd_valid", (1, 7, 9, 2), 3, (2, 2), "valid"),
        ("k3_s3_valid", (1, 5, 5, 2), 3, (3, 3), "valid"),
        ("k4_s2_same", (1, 7, 6, 2), 4, (2, 2), "same"),
        ("k3_s1x2_same", (1, 5, 6, 2), 3, (1, 2), "same"),
        ("k3_s1_valid", (1, 5, 5, 2), 3, (1, 1), "valid"),
    )
    def test_matches_numpy_reference(self, shape, k, strides, padding):
        rng = np.random.default_rng(0)
        x = rng.standard_normal(shape).astype("float32")
        kernel = rng.standard_normal((k, k, shape[-1], 4)).astype("float32")
        got = keras_capsules.ops.conv2d(x, kernel, strides, padding)
        self.assertAllClose(
            got,
            references.conv2d(x, kernel, strides, padding),
            atol=1e-4,
            rtol=1e-4,
        )


class DepthwiseConv2DTest(TestCase):
    @parameterized.named_parameters(
        ("single_window", (2, 9, 9, 8), 9, (1, 1), "valid", 1),
        ("single_window_strided", (2, 6, 6, 4), 5, (2, 2), "valid", 2),
        ("single_window_rectangular", (1, 5, 7, 3), 4, (3, 4), "valid", 1),
        ("k3_s1_valid", (1, 6, 6, 4), 3, (1, 1), "valid", 2),
        ("k3_s2_same", (1, 7, 6, 2), 3, (2, 2), "same", 1),
    )
    def test_matches_numpy_reference(self, shape, k, strides, padding, mult):
        rng = np.random.default_rng(0)
        x = rng.standard_normal(shape).astype("float32")
        kernel = rng.standard_normal((k, k, shape[-1], mult)).astype("float32")
        got = keras_capsules.ops.depthwise_conv2d(x, kernel, strides, padding)
        self.assertAllClose(
            got,
            references.depthwise_conv2d(x, kernel, strides, padding),
            atol=1e-4,
            rtol=1e-4,
        )
