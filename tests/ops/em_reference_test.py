"""The official option sets reproduce the official EM routing.

`ops.OFFICIAL_EM_OPTIONS` and `ops.OFFICIAL_EM_CLASS_OPTIONS` against the
float64 NumPy transcriptions of google-research capsule_em's
`update_conv_routing` and `update_em_routing` in `tests/references.py`,
through the ops and through the layers. The official code's layout of the
convolutional votes is `wx[batch, indim, outdim, outatom, height, width,
k, k]` (output position, then kernel offset); its `activation_biases` and
`sigma_biases` are our `beta_a` and `beta_v` in
`routing_mode="official"`.
"""

import types

import keras
import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules import layers
from keras_capsules import ops as capsule_ops
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references
from tests.compiled import compiled

pytestmark = backend_marks.EAGER

# float32 routing against the float64 transcriptions.
_TOLERANCE = 1e-4


def _betas(rng, num_out):
    # Scaled so that every term of the official activation logit matters,
    # 5000 beta_a included.
    beta_v = rng.uniform(0.02, 0.1, num_out).astype("float32")
    beta_a = rng.uniform(-2e-3, 2e-3, num_out).astype("float32")
    return beta_v, beta_a


def _with_inactive_children(activations):
    """Zero activations: a whole input type in the first example, a block
    of positions in the second."""
    activations = activations.copy()
    activations[0, ..., 0] = 0.0
    activations[1, 1:3, 1:3] = 0.0
    return activations


def _official_conv(votes, activations, beta_v, beta_a, kernel, strides, pad):
    """Our votes `(batch, out_h, out_w, k * k * num_in, num_out, 16)` and
    input-grid activations, routed by the official transcription; returns
    our poses and activations."""
    batch, out_h, out_w, _, num_out, pose_size = votes.shape
    num_in = activations.shape[-1]
    wx = votes.reshape(
        batch, out_h, out_w, kernel, kernel, num_in, num_out, pose_size
    ).transpose(0, 5, 6, 7, 1, 2, 3, 4)
    # The activation behind each window entry; zero in the padding.
    tiles = references.extract_patches(
        activations, (kernel, kernel), (strides, strides), pad
    ).transpose(0, 5, 1, 2, 3, 4)
    options = capsule_ops.OFFICIAL_EM_OPTIONS
    logit, center = references.official_conv_routing(
        wx,
        tiles,
        beta_a,
        beta_v,
        options["routing_iterations"],
        final_beta=options["final_lambda"],
        min_var=options["min_variance"],
    )
    return (
        center.transpose(0, 3, 4, 1, 2),
        (1.0 / (1.0 + np.exp(-logit))).transpose(0, 2, 3, 1),
    )


def _official_class(votes, activations, beta_v, beta_a):
    options = capsule_ops.OFFICIAL_EM_CLASS_OPTIONS
    # `connector_capsule_mat` passes final_beta / 4 to the routing; the
    # option set holds that quotient.
    logit, center = references.official_class_routing(
        votes,
        activations,
        beta_a,
        beta_v,
        options["routing_iterations"],
        final_beta=options["final_lambda"],
        min_var=options["min_variance"],
    )
    return center, 1.0 / (1.0 + np.exp(-logit))


class OfficialOptionsTest(TestCase):
    def test_contents_and_read_only(self):
        self.assertEqual(
            dict(capsule_ops.OFFICIAL_EM_OPTIONS),
            {
                "routing_iterations": 3,
                "final_lambda": 0.01,
                "min_variance": 5e-4,
                "epsilon": 1e-7,
                "routing_mode": "official",
                "routing_normalization": "reference",
            },
        )
        self.assertEqual(
            dict(capsule_ops.OFFICIAL_EM_CLASS_OPTIONS),
            {
                "routing_iterations": 3,
                "final_lambda": 0.0025,
                "min_variance": 5e-4,
                "epsilon": 1e-5,
                "routing_mode": "official",
            },
        )
        for options in (
            capsule_ops.OFFICIAL_EM_OPTIONS,
            capsule_ops.OFFICIAL_EM_CLASS_OPTIONS,
        ):
            self.assertIsInstance(options, types.MappingProxyType)
            with self.assertRaises(TypeError):
                options["routing_iterations"] = 2

    @parameterized.named_parameters(
        ("seed0", 0, 30, 5),
        ("seed1", 1, 72, 3),
        ("seed2_all_inactive", 2, 16, 4),
    )
    @backend_marks.COMPILED
    def test_dense_matches_official(self, seed, num_in, num_out):
        rng = np.random.default_rng(seed)
        votes = rng.normal(size=(2, num_in, num_out, 16)).astype("float32")
        activations = rng.uniform(size=(2, num_in)).astype("float32")
        activations[0, : num_in // 3] = 0.0
        if seed == 2:
            activations[1] = 0.0
        beta_v, beta_a = _betas(rng, num_out)
        poses, probabilities = compiled(
            capsule_ops.em_routing, **capsule_ops.OFFICIAL_EM_CLASS_OPTIONS
        )(votes, activations, beta_v, beta_a)
        expected = _official_class(votes, activations, beta_v, beta_a)
        self.assertAllClose(poses, expected[0], atol=_TOLERANCE, rtol=0)
        self.assertAllClose(probabilities, expected[1], atol=_TOLERANCE, rtol=0)

    @parameterized.named_parameters(
        # name, seed, grid, num_in, num_out, kernel, strides, padding
        ("s1", 0, 5, 3, 4, 3, 1, "valid"),
        ("s1_seed1", 1, 6, 2, 3, 3, 1, "valid"),
        ("s2", 2, 7, 3, 4, 3, 2, "valid"),
        ("s2_seed3", 3, 9, 2, 3, 3, 2, "valid"),
        ("k2_s2", 4, 6, 2, 3, 2, 2, "valid"),
        # "same" routes the zero-padded grid as "valid" would.
        ("s1_same", 5, 4, 2, 3, 3, 1, "same"),
        ("s2_same", 6, 5, 2, 3, 3, 2, "same"),
    )
    # Two geometries on every backend; the others, the same index arithmetic,
    # on the primary one.
    @pytest.mark.primary_backend(every_backend=("s1", "s2_same"))
    @backend_marks.COMPILED
    def test_conv_matches_official(
        self, seed, grid, num_in, num_out, kernel, strides, padding
    ):
        rng = np.random.default_rng(seed)
        out = -(-grid // strides)
        if padding == "valid":
            out = (grid - kernel) // strides + 1
        children = kernel * kernel * num_in
        votes = rng.normal(size=(2, out, out, children, num_out, 16))
        votes = votes.astype("float32")
        activations = rng.uniform(size=(2, grid, grid, num_in))
        activations = _with_inactive_children(activations.astype("float32"))
        beta_v, beta_a = _betas(rng, num_out)
        geometry = {
            "kernel_size": kernel,
            "strides": strides,
            "padding": padding,
        }
        poses, probabilities = compiled(
            capsule_ops.em_conv_routing,
            **geometry,
            **capsule_ops.OFFICIAL_EM_OPTIONS,
        )(votes, activations, beta_v, beta_a)
        expected = _official_conv(
            votes, activations, beta_v, beta_a, kernel, strides, padding
        )
        self.assertAllClose(poses, expected[0], atol=_TOLERANCE, rtol=0)
        self.assertAllClose(probabilities, expected[1], atol=_TOLERANCE, rtol=0)
        # The check has teeth: the exact per-child normalisation differs.
        exact = compiled(
            capsule_ops.em_conv_routing,
            **geometry,
            **{
                **capsule_ops.OFFICIAL_EM_OPTIONS,
                "routing_normalization": "official",
            },
        )(votes, activations, beta_v, beta_a)
        difference = keras.ops.convert_to_numpy(exact[0]) - expected[0]
        self.assertGreater(np.max(np.abs(difference)), 100 * _TOLERANCE)


class OfficialLayersTest(TestCase):
    """The layers with the official settings route their votes as the
    official code does (EMConvCaps in the layout of this backend); the
    option sets of the ops splat into the layers unchanged."""

    @parameterized.named_parameters(("s1", 1, 6), ("s2", 2, 7))
    def test_em_conv_caps(self, strides, grid):
        rng = np.random.default_rng(10 + strides)
        num_in, num_out = 3, 4
        poses = rng.normal(size=(2, grid, grid, num_in, 4, 4))
        poses = poses.astype("float32")
        activations = rng.uniform(size=(2, grid, grid, num_in))
        activations = _with_inactive_children(activations.astype("float32"))
        kernel = rng.normal(0, 0.3, (3, 3, num_in, num_out, 4, 4))
        beta_v, beta_a = _betas(rng, num_out)
        layer = layers.EMConvCaps(
            num_out,
            3,
            strides=strides,
            **capsule_ops.OFFICIAL_EM_OPTIONS,
        )
        layer.build([poses.shape, activations.shape])
        layer.set_weights([kernel.astype("float32"), beta_v, beta_a])
        out_poses, out_activations = layer([poses, activations])
        votes = references.em_conv_votes(
            poses, layer.get_weights()[0], 3, strides
        )
        expected = _official_conv(
            votes, activations, beta_v, beta_a, 3, strides, "valid"
        )
        out = expected[0].shape[1]
        self.assertAllClose(
            out_poses,
            expected[0].reshape(2, out, out, num_out, 4, 4),
            atol=_TOLERANCE,
            rtol=0,
        )
        self.assertAllClose(
            out_activations, expected[1], atol=_TOLERANCE, rtol=0
        )

    def test_em_class_caps(self):
        rng = np.random.default_rng(12)
        num_in, num_classes = 4, 5
        poses = rng.normal(size=(2, 3, 3, num_in, 4, 4)).astype("float32")
        activations = rng.uniform(size=(2, 3, 3, num_in)).astype("float32")
        activations = _with_inactive_children(activations)
        kernel = rng.normal(0, 0.5, (num_in, num_classes, 4, 4))
        beta_v, beta_a = _betas(rng, num_classes)
        layer = layers.EMClassCaps(
            num_classes,
            coordinate_addition=False,
            **capsule_ops.OFFICIAL_EM_CLASS_OPTIONS,
        )
        layer.build([poses.shape, activations.shape])
        layer.set_weights([kernel.astype("float32"), beta_v, beta_a])
        class_poses, class_activations = layer([poses, activations])
        votes = references.em_class_votes(
            poses, layer.get_weights()[0], None, None
        )
        expected = _official_class(
            votes, activations.reshape(2, -1), beta_v, beta_a
        )
        self.assertAllClose(
            class_poses,
            expected[0].reshape(2, num_classes, 4, 4),
            atol=_TOLERANCE,
            rtol=0,
        )
        self.assertAllClose(
            class_activations, expected[1], atol=_TOLERANCE, rtol=0
        )
