import numpy as np
import pytest

from keras_capsules.models import StackedCapsuleAutoencoder
from keras_capsules.testing import TestCase
from tests.layers import scae_cases

pytest.importorskip("matplotlib")

from keras_capsules.visualization import learned_templates  # noqa: E402
from keras_capsules.visualization import object_presence_by_class  # noqa: E402
from keras_capsules.visualization import part_reconstructions  # noqa: E402
from tests import backend_marks

# Figures: the networks they draw are tested on every backend by the
# model tests.
pytestmark = backend_marks.RUN_ONCE


class StackedCapsuleAutoencoderFiguresTest(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.model = StackedCapsuleAutoencoder(**scae_cases.SMALL_MODEL)
        cls.images = np.random.default_rng(0).random((5, 28, 28, 1))

    def test_learned_templates(self):
        fig = learned_templates(self.model, columns=4)
        self.assertLen(fig.axes, 6)
        self.assertEqual(fig.axes[0].images[0].get_array().shape, (7, 7))
        self.assertEqual(fig.axes[5].get_title(), "5")

    def test_part_reconstructions(self):
        fig = part_reconstructions(self.model, self.images[:3])
        self.assertLen(fig.axes, 9)
        self.assertEqual(fig.axes[-1].images[0].get_array().shape, (28, 28, 3))
        with self.assertRaisesRegex(ValueError, "images.shape"):
            part_reconstructions(self.model, np.zeros((2, 40, 40, 1)))
        with self.assertRaisesRegex(ValueError, "images"):
            part_reconstructions(self.model, self.images * 255)

    def test_object_presence_by_class(self):
        labels = np.array([0, 1, 1, 3, 9])
        fig = object_presence_by_class(self.model, self.images, labels)
        grid = fig.axes[0].images[0].get_array()
        self.assertEqual(grid.shape, (10, 4))
        self.assertAllClose(grid.max(), 1.0)
        self.assertAllClose(grid[2], np.zeros(4))
        prior = object_presence_by_class(
            self.model, self.images, labels, kind="prior"
        )
        self.assertIn("prior", prior.axes[0].get_title())
        with self.assertRaisesRegex(ValueError, "labels"):
            object_presence_by_class(self.model, self.images, labels[:2])
        with self.assertRaisesRegex(ValueError, "kind"):
            object_presence_by_class(
                self.model, self.images, labels, kind="mean"
            )

    def test_rejects_other_models(self):
        with self.assertRaisesRegex(TypeError, "StackedCapsuleAutoencoder"):
            learned_templates(object())
