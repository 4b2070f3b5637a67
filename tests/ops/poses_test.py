import numpy as np
from absl.testing import parameterized
from keras import ops

from keras_capsules.ops import geometric_transform
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references

pytestmark = backend_marks.EAGER


def _params(shape=(2, 5, 6), scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype("float32")


class GeometricTransformTest(TestCase):
    @parameterized.named_parameters(
        ("affine", False, True),
        ("similarity", True, True),
        ("affine_linear", False, False),
        ("similarity_linear", True, False),
    )
    def test_matches_the_official_maths(self, similarity, nonlinear):
        params = _params()
        expected = references.scae_geometric_transform(
            params, similarity=similarity, nonlinear=nonlinear
        )
        matrix = geometric_transform(
            params, similarity=similarity, nonlinear=nonlinear, as_matrix=True
        )
        six = geometric_transform(
            params, similarity=similarity, nonlinear=nonlinear
        )
        self.assertAllClose(matrix, expected, atol=1e-5, rtol=1e-5)
        self.assertAllClose(
            six, expected[..., :2, :].reshape(2, 5, 6), atol=1e-5, rtol=1e-5
        )

    def test_determinant_is_the_product_of_the_scales(self):
        params = _params(shape=(64, 6), scale=30.0)
        matrix = ops.convert_to_numpy(
            geometric_transform(params, as_matrix=True)
        )
        determinant = np.linalg.det(matrix[:, :2, :2].astype("float64"))
        sigmoid = 1 / (1 + np.exp(-params[:, :2].astype("float64")))
        self.assertAllClose(
            determinant, np.prod(sigmoid + 0.01, axis=1), rtol=1e-4
        )
        self.assertTrue(np.all(determinant >= 1e-4 * (1 - 1e-4)))

    def test_zero_params(self):
        # Scales sigmoid(0) + 0.01, no rotation, shear or shift.
        six = geometric_transform(np.zeros((1, 6), "float32"))
        self.assertAllClose(six, np.array([[0.51, 0, 0, 0, 0.51, 0]]))

    def test_half_precision(self):
        for dtype in ("float16", "bfloat16"):
            params = ops.cast(_params(scale=100.0), dtype)
            six = geometric_transform(params)
            self.assertEqual(ops.convert_to_numpy(six).dtype.name, dtype)
            self.assertAllFinite(ops.cast(six, "float32"))

    def test_rejects_wrong_shapes_and_options(self):
        with self.assertRaisesRegex(ValueError, r"params.shape=\(2, 5\)"):
            geometric_transform(np.zeros((2, 5), "float32"))
        with self.assertRaisesRegex(TypeError, "similarity"):
            geometric_transform(np.zeros((2, 6), "float32"), similarity=1)
