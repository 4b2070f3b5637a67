"""EMConvCaps and the patch ops trace into one `torch.compile` graph.

A graph break inside the routing loop sends the whole loop back to eager
execution (NumPy constants, `keras.ops.max`), and `keras.ops.pad` made
dynamo retrace every step; `fullgraph=True` turns any break into an error.
The `eager` backend of `torch.compile` traces without generating code, so
these tests take seconds.
"""

import keras
import numpy as np
from absl.testing import parameterized

import keras_capsules
from keras_capsules.testing import TestCase


class TorchCompileTest(TestCase):
    def setUp(self):
        super().setUp()
        if keras.backend.backend() != "torch":
            self.skipTest("torch.compile exists on the PyTorch backend only")
        import torch  # noqa: TID251

        self.torch = torch
        torch._dynamo.reset()

    def _compile(self, fn):
        return self.torch.compile(fn, fullgraph=True, backend="eager")

    @parameterized.named_parameters(
        ("official", "official"), ("reference", "reference")
    )
    def test_em_conv_caps_call_is_one_graph(self, normalization):
        layer = keras_capsules.layers.EMConvCaps(
            num_capsules=4,
            kernel_size=3,
            strides=1,
            padding="same",
            routing_iterations=2,
            routing_normalization=normalization,
        )
        rng = np.random.default_rng(1)
        poses = self.torch.tensor(
            rng.standard_normal((2, 4, 4, 3, 4, 4)).astype("float32")
        )
        activations = self.torch.tensor(
            rng.uniform(size=(2, 4, 4, 3)).astype("float32")
        )
        expected = layer([poses, activations])
        compiled = self._compile(layer.call)([poses, activations])
        for got, want in zip(compiled, expected):
            self.assertAllClose(got, want, atol=1e-5, rtol=1e-5)

    def test_max_fold_and_coordinates_are_one_graph(self):
        patches = self.torch.tensor(
            np.random.default_rng(2)
            .standard_normal((1, 2, 2, 2, 2, 3))
            .astype("float32")
        )

        def fold(patches):
            return keras_capsules.ops.fold_capsule_patches(
                patches, grid_size=(5, 5), strides=3, reduction="max"
            )

        self.assertAllClose(self._compile(fold)(patches), fold(patches))
        votes = self.torch.zeros((1, 3, 3, 2, 5, 4, 4))
        self.assertAllClose(
            self._compile(keras_capsules.ops.add_coordinates)(votes),
            keras_capsules.ops.add_coordinates(votes),
        )
