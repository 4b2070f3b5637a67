import keras
import numpy as np
from absl.testing import parameterized

from keras_capsules.layers import PrimaryMatrixCaps
from keras_capsules.testing import TestCase
from tests import backend_marks

pytestmark = backend_marks.EAGER


def _numpy_primary(x, layer):
    """Poses and activations from explicit loops over positions."""
    weights = {w.name: keras.ops.convert_to_numpy(w) for w in layer.weights}
    kernel_h, kernel_w = layer.kernel_size
    stride_h, stride_w = layer.strides
    batch, height, width, _ = x.shape
    out_h = (height - kernel_h) // stride_h + 1
    out_w = (width - kernel_w) // stride_w + 1
    poses = np.zeros((batch, out_h, out_w, layer.num_capsules, 4, 4))
    activations = np.zeros((batch, out_h, out_w, layer.num_capsules))
    for i in range(out_h):
        for j in range(out_w):
            window = x[
                :,
                i * stride_h : i * stride_h + kernel_h,
                j * stride_w : j * stride_w + kernel_w,
            ]
            pose = np.einsum("buvc,uvcn->bn", window, weights["pose_kernel"])
            pose = pose + weights["pose_bias"]
            poses[:, i, j] = pose.reshape(batch, layer.num_capsules, 4, 4)
            logit = np.einsum(
                "buvc,uvcn->bn", window, weights["activation_kernel"]
            )
            logit = logit + weights["activation_bias"]
            activations[:, i, j] = 1.0 / (1.0 + np.exp(-logit))
    return poses, activations


class PrimaryMatrixCapsTest(TestCase):
    @parameterized.named_parameters(
        ("default_1x1", {"num_capsules": 3}, (2, 4, 4, 5), (4, 4)),
        (
            "k3_s2_valid",
            {"num_capsules": 2, "kernel_size": (3, 3), "strides": (2, 2)},
            (2, 5, 5, 3),
            (2, 2),
        ),
        (
            "k3_s2_same",
            {
                "num_capsules": 2,
                "kernel_size": (3, 3),
                "strides": (2, 2),
                "padding": "same",
            },
            (2, 5, 5, 3),
            (3, 3),
        ),
    )
    @backend_marks.COMPILED
    def test_layer_basics(self, init_kwargs, input_shape, out_grid):
        num_capsules = init_kwargs["num_capsules"]
        channels = input_shape[-1]
        kernel = np.prod(init_kwargs.get("kernel_size", 1))
        self.run_layer_test(
            PrimaryMatrixCaps,
            init_kwargs,
            input_shape=input_shape,
            expected_output_shape=[
                (2,) + out_grid + (num_capsules, 4, 4),
                (2,) + out_grid + (num_capsules,),
            ],
            expected_num_trainable_weights=4,
            expected_num_params=kernel * channels * num_capsules * 17
            + num_capsules * 17,
        )

    def test_paper_parameter_count(self):
        # A = B = 32: 32*32*16 + 32*16 + 32*32 + 32.
        layer = PrimaryMatrixCaps(num_capsules=32)
        layer.build((None, 12, 12, 32))
        self.assertEqual(layer.count_params(), 17_952)

    def test_matches_numpy(self):
        x = np.random.default_rng(0).normal(size=(2, 5, 5, 3))
        x = x.astype("float32")
        layer = PrimaryMatrixCaps(
            num_capsules=2,
            kernel_size=3,
            strides=2,
            bias_initializer="random_normal",
        )
        poses, activations = layer(x)
        expected = _numpy_primary(x, layer)
        self.assertAllClose(poses, expected[0], atol=1e-5)
        self.assertAllClose(activations, expected[1], atol=1e-6)

    def test_official_activation_offset(self):
        # Zero features: the activation is sigmoid(-1), as in the official
        # sigmoid(logit - 1.0).
        _, activations = PrimaryMatrixCaps(num_capsules=2)(
            np.zeros((1, 2, 2, 3), "float32")
        )
        self.assertAllClose(
            activations, np.full((1, 2, 2, 2), 1 / (1 + np.e)), atol=1e-6
        )

    def test_unknown_spatial_size(self):
        inputs = keras.Input((None, None, 3))
        poses, activations = PrimaryMatrixCaps(num_capsules=2)(inputs)
        self.assertShapeEqual(poses.shape, (None, None, None, 2, 4, 4))
        self.assertShapeEqual(activations.shape, (None, None, None, 2))

    def test_mixed_precision(self):
        for policy in ("mixed_float16", "mixed_bfloat16"):
            keras.config.set_dtype_policy(policy)
            self.addCleanup(keras.config.set_dtype_policy, "float32")
            layer = PrimaryMatrixCaps(num_capsules=2)
            poses, activations = layer(1e4 * np.ones((2, 3, 3, 4), "float32"))
            compute = policy.split("_")[1]
            for value in (poses, activations):
                self.assertEqual(
                    keras.backend.standardize_dtype(value.dtype), compute
                )
            self.assertEqual(
                keras.backend.standardize_dtype(layer.pose_kernel.dtype),
                "float32",
            )
            self.assertAllFinite(activations)
        keras.config.set_dtype_policy("float32")

    def test_errors(self):
        with self.assertRaisesRegex(
            ValueError, r"positive integer.*Received: num_capsules=0"
        ):
            PrimaryMatrixCaps(num_capsules=0)
        with self.assertRaisesRegex(
            ValueError, r"2 equal positive.*Received: pose_shape=\(4, 3\)"
        ):
            PrimaryMatrixCaps(num_capsules=2, pose_shape=(4, 3))
        with self.assertRaisesRegex(
            ValueError, r"padding must be .*Received: padding=causal"
        ):
            PrimaryMatrixCaps(num_capsules=2, padding="causal")
        with self.assertRaisesRegex(
            ValueError, r"4D input.*Received: input_shape=\(None, 4, 4\)"
        ):
            PrimaryMatrixCaps(num_capsules=2).build((None, 4, 4))
        with self.assertRaisesRegex(
            ValueError, r"no output positions.*Received: kernel_size=\(5, 5\)"
        ):
            PrimaryMatrixCaps(num_capsules=2, kernel_size=5).build(
                (None, 4, 4, 3)
            )
