import io
from unittest import mock

import keras
import numpy as np
import pytest

from keras_capsules.testing import TestCase
from tests import non_finite

pytest.importorskip("matplotlib")

from keras_capsules.visualization import reconstructions  # noqa: E402
from tests import backend_marks

# Figures: the networks they draw are tested on every backend by the
# model tests.
pytestmark = backend_marks.RUN_ONCE


def _images(shape, seed=0):
    return np.random.default_rng(seed).random(shape, "float32")


def _arrays(fig, row):
    """The arrays drawn in `row` (0: inputs, 1: reconstructions)."""
    columns = len(fig.axes) // 2
    return np.stack(
        [
            ax.images[0].get_array()
            for ax in fig.axes[row * columns : (row + 1) * columns]
        ]
    )


class ReconstructionsTest(TestCase):
    # Cases are subtests rather than parameters: every test method pays
    # the shared setUp's `clear_session`, and these draw no model.

    def test_one_reconstruction_per_input(self):
        for input_shape, shape in (
            ((5, 8, 6, 1), (5, 8, 6, 1)),
            ((5, 8, 6), (5, 8, 6)),
            ((5, 8, 6, 1), (5, 8, 6)),
            ((5, 8, 6), (5, 8, 6, 1)),
        ):
            with self.subTest(input_shape=input_shape, shape=shape):
                inputs, outputs = _images(input_shape), _images(shape, 1)
                fig = reconstructions(inputs, outputs, titles=list("abcde"))
                self.assertLen(fig.axes, 2 * 5)
                self.assertEqual(
                    [ax.get_title() for ax in fig.axes[:5]], list("abcde")
                )
                self.assertEqual(fig.axes[0].get_ylabel(), "input")
                self.assertEqual(fig.axes[5].get_ylabel(), "reconstruction")
                self.assertEqual(fig.legends, [])
                self.assertAllClose(_arrays(fig, 0), inputs.reshape(5, 8, 6))
                self.assertAllClose(_arrays(fig, 1), outputs.reshape(5, 8, 6))
                for ax in fig.axes:
                    self.assertEqual(ax.images[0].get_cmap().name, "gray")
                    self.assertEqual(ax.images[0].get_clim(), (0.0, 1.0))
        fig.savefig(io.BytesIO(), format="png")
        inputs = _images((2, 8, 6, 3))
        fig = reconstructions(inputs, inputs, num_images=1)
        self.assertLen(fig.axes, 2)
        self.assertEqual(_arrays(fig, 1).shape, (1, 8, 6, 3))

    def test_one_colour_channel_per_reconstruction(self):
        for shape, output_names, labels in (
            ((4, 2, 8, 6), ["x", "y"], ["x (red)", "y (green)"]),
            (
                (4, 3, 8, 6, 1),
                None,
                [
                    "reconstruction 1 (red)",
                    "reconstruction 2 (green)",
                    "reconstruction 3 (blue)",
                ],
            ),
        ):
            with self.subTest(shape=shape):
                num_outputs = shape[1]
                inputs, outputs = _images((4, 8, 6, 1)), _images(shape, 1)
                fig = reconstructions(
                    inputs, outputs, num_images=3, output_names=output_names
                )
                self.assertLen(fig.axes, 2 * 3)
                colour = _arrays(fig, 1)
                self.assertEqual(colour.shape, (3, 8, 6, 3))
                expected = np.moveaxis(outputs.reshape(shape[:4]), 1, -1)
                self.assertAllClose(colour[..., :num_outputs], expected[:3])
                self.assertTrue(np.all(colour[..., num_outputs:] == 0))
                (legend,) = fig.legends
                self.assertEqual(
                    [text.get_text() for text in legend.get_texts()], labels
                )
        fig.savefig(io.BytesIO(), format="png")

    def test_rejects_invalid_arguments(self):
        inputs = _images((3, 8, 6))
        cases = [
            ((inputs[0], inputs), "inputs must have shape"),
            ((_images((3, 8, 6, 2)), inputs), "inputs must have 1 .* or 3"),
            ((inputs, inputs[:2]), "outputs.shape=\\(2, 8, 6\\)"),
            ((inputs, _images((3, 4, 8, 6))), "1 to 3 gray reconstructions"),
            ((inputs, _images((3, 6, 8))), "outputs.shape=\\(3, 6, 8\\)"),
        ]
        for args, message in cases:
            with self.assertRaisesRegex(ValueError, message):
                reconstructions(*args)
        with self.assertRaisesRegex(ValueError, "num_images must be at most"):
            reconstructions(inputs, inputs, num_images=4)
        with self.assertRaisesRegex(ValueError, "titles must be None or a"):
            reconstructions(inputs, inputs, titles=["a"])
        with self.assertRaisesRegex(ValueError, "output_names names the"):
            reconstructions(inputs, inputs, output_names=["a"])
        with self.assertRaisesRegex(ValueError, "output_names must be None"):
            reconstructions(
                inputs, _images((3, 2, 8, 6)), output_names=["a", "b", "c"]
            )
        # `import matplotlib` fails for a module mapped to None.
        with mock.patch.dict("sys.modules", {"matplotlib": None}):
            with self.assertRaisesRegex(ImportError, "\\[visualization\\]"):
                reconstructions(inputs, inputs)

    def test_rejects_non_finite_and_out_of_range_values(self):
        inputs = _images((3, 8, 6, 1))
        digits = _images((3, 2, 8, 6))
        for case, bad in non_finite.non_finite_images(inputs).items():
            pattern = r"Argument inputs must hold finite values.*Received: "
            with self.subTest(case=case):
                with self.assertRaisesRegex(
                    ValueError, pattern + "inputs" + non_finite.RECEIVED[case]
                ):
                    reconstructions(bad, inputs)
                with self.assertRaisesRegex(
                    ValueError,
                    pattern.replace("inputs", "outputs")
                    + "outputs"
                    + non_finite.RECEIVED[case],
                ):
                    reconstructions(inputs, bad)
        for case, bad in non_finite.non_finite_images(digits).items():
            with self.subTest(case=case, outputs="K per input"):
                with self.assertRaisesRegex(
                    ValueError, r"outputs must hold finite values"
                ):
                    reconstructions(inputs, bad)
        pixels = np.zeros_like(inputs)
        pixels[1, 2, 3] = 255.0
        with self.assertRaisesRegex(
            ValueError,
            r"inputs must hold values in \[0, 1\] \(images of 0\.\.255 "
            r"values: divide them by 255\)\. Received: inputs\.min\(\)=0\.0, "
            r"inputs\.max\(\)=255\.0$",
        ):
            reconstructions(pixels.astype("uint8"), inputs)
        pixels[1, 2, 3] = -0.5
        with self.assertRaisesRegex(
            ValueError,
            r"outputs must hold values in \[0, 1\]\. "
            r"Received: outputs\.min\(\)=-0\.5, outputs\.max\(\)=0\.0$",
        ):
            reconstructions(inputs, pixels)
        # Finite values in [0, 1], the ends included, are drawn, also from
        # a backend tensor.
        ends = np.zeros_like(inputs)
        ends[0] = 1.0
        fig = reconstructions(keras.ops.convert_to_tensor(ends), inputs)
        self.assertAllClose(_arrays(fig, 0), ends[..., 0])
