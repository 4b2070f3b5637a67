"""The naive EM baseline of the benchmarks against keras_capsules.

`benchmarks.run` compares `benchmarks/naive_em.py` with `EMConvCaps` and
`MatrixCapsNet`; these tests check that the comparison is fair: where
windows do not overlap the naive layer computes the same function as
`EMConvCaps(routing_normalization="window")`, and the two models of every
compared point start from the same weights and give outputs of one shape,
and the naive one trains to a finite loss.
"""

from unittest import mock

import keras
import numpy as np
from absl.testing import parameterized

import keras_capsules
from benchmarks import common
from benchmarks import models
from benchmarks import naive_em
from keras_capsules.testing import TestCase
from tests import backend_marks

# The benchmarks' baseline and its comparison points: the layers they
# compare are tested on every backend by the layer tests.
pytestmark = backend_marks.RUN_ONCE

# Sizes far below the benchmark's, measured through its own build path:
# ConvCaps1 on a 5x5 grid (3 types to 4), and the tiny MatrixCapsNet on
# the smallest images it takes (17x17: grids 7, 3 and 1), so that windows
# overlap in the first capsule layer.
_TINY_EM_CONV_CAPS = {"grid_size": 5, "num_in": 3, "num_out": 4}
_TINY_MATRIX_CAPSNET = keras_capsules.models.MatrixCapsNet.presets["tiny"][
    "config"
]
_TINY_IMAGE_SIZE = 17


def _spec(model, impl):
    """A point of `benchmarks.run` at tiny sizes (config `"tiny"`)."""
    return {
        "model": model,
        "variant": impl,
        "config": "tiny",
        "impl": impl,
        "batch_size": 2,
        "routing_iterations": 1,
        "image_size": _TINY_IMAGE_SIZE,
        "jit": None,
        "steps": 1,
        "warmup": 1,
        "seed": 0,
    }


def _build(spec):
    """What `benchmarks.runner.measure_point` builds for `spec`."""
    keras.utils.clear_session()
    keras.utils.set_random_seed(spec["seed"])
    return models.build(spec, np.random.default_rng(spec["seed"]))


class NaiveEMConvCapsTest(TestCase):
    @parameterized.named_parameters(("one_iteration", 1), ("two_iterations", 2))
    def test_equals_em_conv_caps_where_windows_do_not_overlap(self, iterations):
        # Each child feeds the parents of one window only, so with the
        # per-window normalisation of the naive layer both compute the same
        # function. (The default normalisation differs: such a child gets
        # R = 1 for every parent type.)
        rng = np.random.default_rng(0)
        poses = rng.standard_normal((2, 4, 4, 3, 4, 4)).astype("float32")
        activations = rng.uniform(size=(2, 4, 4, 3)).astype("float32")
        ours = keras_capsules.layers.EMConvCaps(
            num_capsules=5,
            kernel_size=2,
            strides=2,
            routing_iterations=iterations,
            routing_normalization="window",
        )
        naive = naive_em.NaiveEMConvCaps(
            num_capsules=5,
            kernel_size=2,
            strides=2,
            routing_iterations=iterations,
        )
        expected = ours([poses, activations])
        naive([poses, activations])
        naive.set_weights(ours.get_weights())
        actual = naive([poses, activations])
        for a, b in zip(actual, expected):
            self.assertShapeEqual(a.shape, b.shape)
            self.assertAllClose(a, b, atol=1e-4, rtol=1e-4)


class ComparedPointsTest(TestCase):
    """The `ours` and `naive` points of `benchmarks.run` for one seed."""

    def setUp(self):
        super().setUp()
        for table, config in (
            (models.EM_CONV_CAPS_CONFIGS, _TINY_EM_CONV_CAPS),
            (common.MATRIX_CAPSNET_CONFIGS, dict(_TINY_MATRIX_CAPSNET)),
        ):
            patch = mock.patch.dict(table, tiny=config)
            patch.start()
            self.addCleanup(patch.stop)

    def _assert_fair_comparison(self, model):
        ours, x, y = _build(_spec(model, "ours"))
        naive, x_naive, y_naive = _build(_spec(model, "naive"))
        for a, b in zip(keras.tree.flatten(x), keras.tree.flatten(x_naive)):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(y, y_naive)
        # Layer by layer: MatrixCapsNet also owns its spread-margin
        # variable, which the naive model's loss holds as a constant.
        weighted = [layer for layer in naive.layers if layer.weights]
        self.assertNotEqual(weighted, [])
        for layer in weighted:
            expected = ours.get_layer(layer.name).get_weights()
            actual = layer.get_weights()
            self.assertEqual(len(actual), len(expected), layer.name)
            for a, b in zip(actual, expected):
                np.testing.assert_array_equal(a, b, err_msg=layer.name)
        self.assertEqual(
            sum(layer.count_params() for layer in naive.layers),
            sum(layer.count_params() for layer in ours.layers),
        )
        out_ours = ours.predict_on_batch(x)
        out_naive = naive.predict_on_batch(x)
        self.assertShapeEqual(out_naive.shape, out_ours.shape)
        self.assertAllFinite(out_ours)
        self.assertAllFinite(out_naive)
        # The package's own tests train `ours`.
        logs = naive.train_on_batch(x, y, return_dict=True)
        self.assertAllFinite(logs["loss"])

    def test_em_conv_caps(self):
        self._assert_fair_comparison("em_conv_caps")

    def test_matrix_capsnet(self):
        self._assert_fair_comparison("matrix_capsnet")
