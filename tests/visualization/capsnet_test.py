import io

import numpy as np
import pytest
from keras import ops

from keras_capsules.models import CapsNet
from keras_capsules.models import EfficientCapsNet
from keras_capsules.testing import TestCase
from tests import non_finite
from tests import references

pytest.importorskip("matplotlib")

from keras_capsules.visualization import coupling_coefficients  # noqa: E402
from keras_capsules.visualization import perturbation_grid  # noqa: E402
from tests import backend_marks

# Figures: the networks they draw are tested on every backend by the
# model tests.
pytestmark = backend_marks.RUN_ONCE

# Conv1 9x9 then PrimaryCaps 9x9 stride 2 on 28x28: a 6x6 grid.
_GRID = (6, 6)


def _tiny_capsnet(**kwargs):
    return CapsNet(
        conv_filters=8,
        num_primary_capsules=4,
        primary_capsule_dim=4,
        capsule_dim=4,
        **kwargs,
    )


def _images(fig):
    return [ax.images[0].get_array() for ax in fig.axes if ax.images]


class PerturbationGridTest(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.model = _tiny_capsnet(decoder_units=(16,))
        cls.image = np.random.default_rng(0).random((28, 28, 1), "float32")

    def test_one_row_per_dimension_one_column_per_offset(self):
        fig = perturbation_grid(self.model, self.image)
        self.assertLen(fig.axes, 4 * 11)
        self.assertEqual(
            [ax.get_title() for ax in fig.axes[:11]],
            [f"{v:+.2f}" for v in np.linspace(-0.25, 0.25, 11)],
        )
        self.assertEqual(
            [ax.get_ylabel() for ax in fig.axes[::11]],
            [f"dim {d}" for d in range(4)],
        )
        for array in _images(fig):
            self.assertEqual(array.shape, (28, 28))

    def test_draws_an_efficient_capsnet(self):
        model = EfficientCapsNet(
            conv_filters=(4, 4, 4, 8), capsule_dim=3, primary_capsule_dim=4
        )
        fig = perturbation_grid(model, self.image, label=2, steps=3)
        self.assertLen(fig.axes, 3 * 3)
        for array in _images(fig):
            self.assertEqual(array.shape, (28, 28))

    def test_decodes_the_perturbed_capsule(self):
        dimension = 3
        capsules = ops.convert_to_numpy(
            self.model.class_capsules(self.image[None])
        )
        # By default, the capsule of the predicted class.
        label = int(np.argmax(np.linalg.norm(capsules[0], axis=-1)))
        fig = perturbation_grid(
            self.model,
            self.image[..., 0],
            dimensions=[1, dimension],
            steps=3,
            span=0.5,
        )
        self.assertLen(fig.axes, 2 * 3)
        self.assertIn(f"Class {label} ", fig.get_suptitle())
        capsules = np.repeat(capsules, 3, axis=0)
        capsules[:, label, dimension] += [-0.5, 0.0, 0.5]
        y = np.eye(10, dtype="float32")[[label] * 3]
        expected = ops.convert_to_numpy(self.model.decode(capsules, y))
        images = _images(fig)[3:]
        self.assertAllClose(images, list(expected[..., 0]), atol=1e-5)
        fig.savefig(io.BytesIO(), format="png")

    def test_rejects_invalid_arguments(self):
        cases = [
            ({"label": 10}, "label must be None or a class in \\[0, 10\\)"),
            ({"dimensions": [4]}, "dimensions must be None or a non-empty"),
            ({"dimensions": []}, "dimensions must be None or a non-empty"),
            ({"steps": 1}, "steps must be an integer >= 2"),
            ({"span": 0}, "span must be a finite positive number"),
        ]
        for kwargs, message in cases:
            with self.assertRaisesRegex(ValueError, message):
                perturbation_grid(self.model, self.image, **kwargs)
        with self.assertRaisesRegex(ValueError, "image.shape=\\(1, 28, 28"):
            perturbation_grid(self.model, self.image[None])
        with self.assertRaisesRegex(TypeError, "model must be a keras_caps"):
            perturbation_grid("model", self.image)

    def test_rejects_non_finite_images(self):
        non_finite.assert_rejected(
            self,
            lambda image: perturbation_grid(self.model, image),
            self.image,
            "image",
            batch=False,
        )


class CouplingCoefficientsTest(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.model = _tiny_capsnet(decoder_units=None)
        cls.image = np.random.default_rng(1).random((28, 28, 1), "float32")

    def test_one_panel_per_class_over_the_primary_grid(self):
        names = [f"class {j}" for j in range(10)]
        fig = coupling_coefficients(self.model, self.image, class_names=names)
        # The input, 10 classes, one empty cell of the 2x6 grid and the
        # colorbar.
        self.assertLen(fig.axes, 2 * 6 + 1)
        self.assertFalse(fig.axes[11].get_visible())
        images = _images(fig)
        self.assertEqual(images[0].shape, (28, 28))
        maps = np.stack(images[1:])
        self.assertEqual(maps.shape, (10,) + _GRID)
        # The mean over types of coefficients that sum to 1 over classes.
        self.assertAllClose(maps.sum(axis=0), np.ones(_GRID), atol=1e-5)
        titles = [ax.get_title() for ax in fig.axes[1:11]]
        lengths = np.linalg.norm(
            ops.convert_to_numpy(self.model.class_capsules(self.image[None])),
            axis=-1,
        )[0]
        self.assertEqual(
            titles, [f"{n}\n|v|={v:.2g}" for n, v in zip(names, lengths)]
        )
        fig.savefig(io.BytesIO(), format="png")

    def test_maps_match_the_numpy_routing(self):
        # The panels are the last iteration's coupling of Procedure 1 on
        # the model's primary capsules and digit kernel, averaged over the
        # primary capsule types at every grid position.
        maps = np.stack(
            _images(coupling_coefficients(self.model, self.image))[1:]
        )
        model = self.model
        primary = model.primary_caps(model.conv1(self.image[None]))
        votes = np.einsum(
            "bid,idjk->bijk",
            ops.convert_to_numpy(primary),
            ops.convert_to_numpy(model.digit_caps.kernel),
        )
        _, coupling = references.dynamic_routing(
            votes, model.digit_caps.routing_iterations
        )
        expected = coupling[0].reshape(_GRID + (4, 10)).mean(axis=2)
        self.assertAllClose(
            maps, np.moveaxis(expected, -1, 0), atol=1e-5, rtol=1e-5
        )

    def test_rejects_invalid_arguments(self):
        with self.assertRaisesRegex(ValueError, "list of 10 strings"):
            coupling_coefficients(self.model, self.image, class_names=["a"])
        with self.assertRaisesRegex(ValueError, "vmax must be None or a"):
            coupling_coefficients(self.model, self.image, vmax=-1.0)
        with self.assertRaisesRegex(ValueError, "image.shape=\\(28, 28, 3\\)"):
            coupling_coefficients(self.model, np.zeros((28, 28, 3)))
        with self.assertRaisesRegex(ValueError, "decoder_units=None"):
            perturbation_grid(self.model, self.image)

    def test_rejects_non_finite_images(self):
        non_finite.assert_rejected(
            self,
            lambda image: coupling_coefficients(self.model, image),
            self.image,
            "image",
            batch=False,
        )
        # The range is the model's business: values beyond [0, 1] are drawn.
        fig = coupling_coefficients(self.model, self.image * 255.0)
        fig.savefig(io.BytesIO(), format="png")
