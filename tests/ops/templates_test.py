import numpy as np
from absl.testing import parameterized
from keras import ops

from keras_capsules.ops import affine_sampling_grid
from keras_capsules.ops import bilinear_sample
from keras_capsules.ops import geometric_transform
from keras_capsules.ops import warp_templates
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import gradients
from tests import references

pytestmark = backend_marks.EAGER
# The sampler's gather differs by backend (`ops/_backend.gathers_per_example`:
# JAX gathers from each image's own table): its tests run on every backend.
SAMPLER = backend_marks.COMPILED


def _random(shape, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype("float32")


def _poses(shape, seed=0):
    # Random official poses: affine transforms of determinant >= 1e-4.
    return ops.convert_to_numpy(geometric_transform(_random(shape, seed)))


class AffineSamplingGridTest(TestCase):
    @parameterized.named_parameters(
        ("mnist_sizes", (40, 40), (11, 11)),
        ("rectangular", (7, 9), (4, 6)),
    )
    def test_matches_sonnets_inverse_grid_warper(self, output, source):
        transforms = _poses((2, 3, 6))
        grid = affine_sampling_grid(transforms, output, source)
        self.assertEqual(tuple(grid.shape), (2, 3) + output + (2,))
        grid = ops.convert_to_numpy(grid)
        for index in np.ndindex(2, 3):
            expected = references.scae_sampling_grid(
                transforms[index], output, source
            )
            self.assertAllClose(grid[index], expected, atol=1e-3, rtol=1e-5)

    def test_identity_spans_the_template(self):
        identity = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 0.0], "float32")
        grid = ops.convert_to_numpy(
            affine_sampling_grid(identity, (3, 5), (11, 21))
        )
        self.assertAllClose(
            grid[0, :, 0], np.array([0.0, 5.0, 10.0, 15.0, 20.0])
        )
        self.assertAllClose(grid[:, 0, 1], np.array([0.0, 5.0, 10.0]))

    def test_rejects_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "transforms.shape"):
            affine_sampling_grid(np.zeros((2, 4), "float32"), (4, 4), (3, 3))
        with self.assertRaisesRegex(ValueError, "output_size"):
            affine_sampling_grid(np.zeros((2, 6), "float32"), 4, (3, 3))


@SAMPLER
class BilinearSampleTest(TestCase):
    def test_matches_the_contrib_resampler(self):
        image = _random((2, 4, 5, 3))
        # Interior, integer, border and outside points, both axes.
        xs = [-1.5, -1.0, -0.5, 0.0, 0.25, 2.0, 3.5, 4.0, 4.5, 5.0, 6.0]
        ys = [-1.0, -0.25, 0.0, 1.5, 3.0, 3.75, 4.0]
        points = np.stack(np.meshgrid(xs, ys), axis=-1).astype("float32")
        points = np.stack([points, points[::-1] + 0.1])
        sampled = bilinear_sample(image, points)
        self.assertEqual(tuple(sampled.shape), (2, 7, 11, 3))
        for b in range(2):
            expected = references.scae_resample(image[b], points[b])
            self.assertAllClose(sampled[b], expected, atol=1e-5, rtol=1e-5)

    def test_gradients_match_finite_differences(self):
        # The hand-written gradient, with respect to the images and to the
        # points: interior points and points in the fading border ring,
        # none on a pixel boundary (where the sampling has a kink).
        image = _random((2, 3, 4, 2), seed=5)
        points = np.array(
            [
                [[0.3, 0.6], [2.7, 1.2], [-0.6, 0.4], [3.4, 2.5]],
                [[1.5, 1.5], [0.1, -0.3], [2.2, 2.8], [-1.5, 0.5]],
            ],
            "float32",
        )
        weights = _random((2, 4, 2), seed=6)

        def reference(image, points):
            return sum(
                np.sum(
                    references.scae_resample(image[b], points[b]) * weights[b]
                )
                for b in range(2)
            )

        grad_image = gradients.gradient(
            lambda x: ops.sum(
                ops.multiply(bilinear_sample(x, points), weights)
            ),
            image,
        )
        grad_points = gradients.gradient(
            lambda p: ops.sum(ops.multiply(bilinear_sample(image, p), weights)),
            points,
        )
        self.assertAllClose(
            grad_image,
            gradients.finite_difference(lambda x: reference(x, points), image),
            atol=1e-5,
            rtol=1e-5,
        )
        self.assertAllClose(
            grad_points,
            gradients.finite_difference(lambda p: reference(image, p), points),
            atol=1e-4,
            rtol=1e-4,
        )
        # The point 1.5 pixels outside has no gradient.
        self.assertAllClose(grad_points[1, 3], np.zeros(2))

    def test_nan_points_leave_the_others_alone(self):
        # A NaN point reads a valid cell (no index error) and the other
        # points sample as without it.
        image = _random((1, 3, 4, 1), seed=7)
        points = np.array([[[0.3, 0.6], [np.nan, 1.0], [1.0, np.nan]]])
        points = points.astype("float32")
        sampled = ops.convert_to_numpy(bilinear_sample(image, points))
        self.assertAllClose(
            sampled[0, 0], references.scae_resample(image[0], points[0, :1])[0]
        )

    def test_half_precision(self):
        image = ops.cast(_random((1, 4, 4, 1)), "float16")
        sampled = bilinear_sample(image, np.full((1, 2, 2), 1.5, "float32"))
        self.assertEqual(ops.convert_to_numpy(sampled).dtype.name, "float16")

    def test_rejects_bad_shapes(self):
        with self.assertRaisesRegex(ValueError, "images.shape"):
            bilinear_sample(np.zeros((4, 4, 1)), np.zeros((4, 2)))
        with self.assertRaisesRegex(ValueError, "coordinates.shape"):
            bilinear_sample(np.zeros((1, 4, 4, 1)), np.zeros((1, 3)))
        with self.assertRaisesRegex(ValueError, "same batch size"):
            bilinear_sample(np.zeros((2, 4, 4, 1)), np.zeros((3, 5, 2)))


@SAMPLER
class WarpTemplatesTest(TestCase):
    @parameterized.named_parameters(
        ("shared_templates", 1, 1), ("per_example_templates", 2, 2)
    )
    def test_matches_the_official_decoder(self, template_batch, channels):
        templates = np.abs(_random((template_batch, 3, 11, 11, channels)))
        transforms = _poses((2, 3, 6), seed=1)
        warped = warp_templates(templates, transforms, (40, 40))
        self.assertEqual(tuple(warped.shape), (2, 3, 40, 40, channels))
        expected = references.scae_warp_templates(
            templates, transforms, (40, 40)
        )
        self.assertAllClose(warped, expected, atol=1e-4, rtol=1e-4)

    def test_gradient_with_respect_to_the_poses(self):
        # Through geometric_transform, as the part decoder uses it:
        # d sum(w * warped) / d raw pose params, against central
        # differences of the float64 official maths.
        templates = np.abs(_random((1, 2, 5, 5, 1), seed=2))
        weights = _random((1, 2, 12, 12, 1), seed=3)
        params = _random((1, 2, 6), seed=4, scale=0.3)

        def loss(raw):
            poses = geometric_transform(raw)
            warped = warp_templates(templates, poses, (12, 12))
            return ops.sum(ops.multiply(warped, weights))

        def reference_loss(raw):
            matrix = references.scae_geometric_transform(raw)
            poses = matrix[..., :2, :].reshape(raw.shape)
            warped = references.scae_warp_templates(templates, poses, (12, 12))
            return np.sum(warped * weights)

        grad = gradients.gradient(loss, params)
        expected = gradients.finite_difference(reference_loss, params)
        self.assertAllFinite(grad)
        self.assertGreater(np.abs(grad).min(), 1e-3)
        self.assertAllClose(grad, expected, atol=2e-3, rtol=2e-3)

    @parameterized.named_parameters(
        ("shared_templates", 1), ("per_example_templates", 2)
    )
    def test_gradient_with_respect_to_the_templates(self, template_batch):
        templates = np.abs(_random((template_batch, 2, 4, 5, 2), seed=7))
        transforms = _poses((2, 2, 6), seed=8)
        weights = _random((2, 2, 9, 8, 2), seed=9)
        grad = gradients.gradient(
            lambda t: ops.sum(
                ops.multiply(warp_templates(t, transforms, (9, 8)), weights)
            ),
            templates,
        )
        expected = gradients.finite_difference(
            lambda t: np.sum(
                references.scae_warp_templates(t, transforms, (9, 8)) * weights
            ),
            templates,
        )
        self.assertGreater(np.abs(expected).max(), 1e-2)
        self.assertAllClose(grad, expected, atol=1e-4, rtol=1e-4)

    def test_rejects_bad_shapes(self):
        with self.assertRaisesRegex(ValueError, "templates.shape"):
            warp_templates(np.zeros((3, 5, 5, 1)), np.zeros((1, 3, 6)), (8, 8))
        with self.assertRaisesRegex(ValueError, "num_templates of templates"):
            warp_templates(
                np.zeros((1, 3, 5, 5, 1)), np.zeros((1, 4, 6)), (8, 8)
            )
