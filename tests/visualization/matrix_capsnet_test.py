import io

import numpy as np
import pytest

from keras_capsules.models import MatrixCapsNet
from keras_capsules.testing import TestCase
from tests import non_finite

pytest.importorskip("matplotlib")

from keras_capsules.visualization import activation_maps  # noqa: E402
from tests import backend_marks

# Figures: the networks they draw are tested on every backend by the
# model tests.
pytestmark = backend_marks.RUN_ONCE


class ActivationMapsTest(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # 17x17, the smallest input, gives grids of 7x7, 3x3 and 1x1; one
        # routing iteration keeps the compiled forward pass small.
        cls.model = MatrixCapsNet.from_preset(
            "tiny", image_shape=(17, 17, 1), num_classes=5, routing_iterations=1
        )
        cls.image = np.random.default_rng(0).random((17, 17, 1), "float32")

    def test_one_row_per_layer_one_panel_per_type(self):
        fig = activation_maps(
            self.model,
            self.image[..., 0],
            max_types=3,
            class_names=list("abcde"),
        )
        image_axes = [ax for ax in fig.axes if ax.images]
        shapes = [ax.images[0].get_array().shape for ax in image_axes]
        self.assertEqual(shapes, [(7, 7)] * 3 + [(3, 3)] * 3 + [(1, 1)] * 3)
        self.assertEqual(
            [ax.get_title() for ax in image_axes], ["0", "1", "2"] * 3
        )
        for ax in image_axes:
            self.assertEqual(ax.images[0].get_clim(), (0.0, 1.0))
            array = ax.images[0].get_array()
            self.assertTrue(np.all((array >= 0) & (array <= 1)))
        self.assertEqual(
            [image_axes[i].get_ylabel() for i in (0, 3, 6)],
            [
                "primary_caps\n7x7\nfirst 3 of 4 types",
                "conv_caps1\n3x3\nfirst 3 of 4 types",
                "conv_caps2\n1x1\nfirst 3 of 4 types",
            ],
        )
        # The image panels, the colorbar and the class bar chart.
        self.assertLen(fig.axes, 9 + 2)
        self.assertEqual(fig.axes[-2].get_ylabel(), "activation a")
        bars = fig.axes[-1]
        self.assertLen(bars.patches, 5)
        self.assertEqual(bars.get_ylim(), (0.0, 1.0))
        self.assertEqual(
            [t.get_text() for t in bars.get_xticklabels()], list("abcde")
        )
        fig.savefig(io.BytesIO(), format="png")

    def test_rejects_invalid_arguments(self):
        with self.assertRaisesRegex(TypeError, "model must be a keras_caps"):
            activation_maps(object(), self.image)
        with self.assertRaisesRegex(ValueError, "image.shape=\\(32, 32, 1\\)"):
            activation_maps(self.model, np.zeros((32, 32, 1)))
        with self.assertRaisesRegex(ValueError, "max_types must be None or"):
            activation_maps(self.model, self.image, max_types=0)
        with self.assertRaisesRegex(ValueError, "list of 5 strings"):
            activation_maps(self.model, self.image, class_names="abcde")

    def test_rejects_non_finite_images(self):
        non_finite.assert_rejected(
            self,
            lambda image: activation_maps(self.model, image),
            self.image,
            "image",
            batch=False,
        )
