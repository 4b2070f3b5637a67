import numpy as np
from absl.testing import parameterized
from keras import ops

from keras_capsules.layers import TemplateDecoder
from keras_capsules.ops import geometric_transform
from keras_capsules.ops import warp_templates
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references
from tests.layers import scae_cases

pytestmark = backend_marks.EAGER


def _poses(batch=2, num=40, seed=0):
    rng = np.random.default_rng(seed)
    params = rng.standard_normal((batch, num, 6)).astype("float32")
    return ops.convert_to_numpy(geometric_transform(params))


def _features(batch=2, num=40, dim=16, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, num, dim)).astype("float32")


class TemplateDecoderTest(TestCase):
    def test_official_shapes_and_parameters(self):
        layer = TemplateDecoder(seed=0)
        out = layer(_poses(), _features())
        self.assertEqual(tuple(out["templates"].shape), (2, 40, 40, 40, 1))
        self.assertEqual(
            tuple(out["template_logits"].shape), (2, 40, 40, 40, 1)
        )
        self.assertEqual(
            layer.count_params(), scae_cases.official_count("template_decoder")
        )

    def test_initial_templates(self):
        # Orthogonal rows of a QR decomposition, rescaled to [0, 1] before
        # the sigmoid; no alpha (zeros) and a background logit of 0.
        layer = TemplateDecoder(num_parts=5, template_size=(4, 4), seed=2)
        layer(_poses(num=5), _features(num=5))
        logits = ops.convert_to_numpy(layer.template_logits)
        self.assertAllClose(logits.min(), 0.0)
        self.assertAllClose(logits.max(), 1.0)
        rows = logits.reshape(5, -1)
        centred = (rows - 0.0) * (logits.max() - logits.min())
        self.assertEqual(np.linalg.matrix_rank(centred), 5)
        self.assertAllClose(layer.template_alpha, np.zeros((5, 4, 4, 1)))
        self.assertAllClose(layer.background_logit, np.zeros(1))

    def test_warps_the_coloured_templates(self):
        layer = TemplateDecoder(num_parts=3, template_size=(5, 5), seed=0)
        poses, features = _poses(num=3), _features(num=3)
        out = layer(poses, features)
        templates = ops.convert_to_numpy(layer.templates(features))
        self.assertEqual(templates.shape, (2, 3, 5, 5, 1))
        # Sigmoid templates times a sigmoid colour, in (0, 1).
        self.assertTrue(np.all((templates > 0) & (templates < 1)))
        expected = references.scae_warp_templates(templates, poses, (40, 40))
        self.assertAllClose(out["templates"], expected, atol=1e-4)
        self.assertAllClose(
            out["background"],
            references.sigmoid(ops.convert_to_numpy(layer.background_value)),
        )
        self.assertAllClose(out["background_logit"], np.log(2.0) * np.ones(1))

    @parameterized.named_parameters(("sigmoid", "sigmoid"), ("relu1", "relu1"))
    def test_without_colour_or_alpha(self, activation):
        layer = TemplateDecoder(
            num_parts=3,
            template_size=(5, 5),
            output_size=(12, 12),
            colorize_templates=False,
            use_alpha_channel=False,
            template_activation=activation,
        )
        poses = _poses(num=3)
        out = layer(poses)
        self.assertEqual(len(layer.weights), 3)
        templates = layer.templates()
        self.assertEqual(tuple(templates.shape), (1, 3, 5, 5, 1))
        temperature = (
            np.log1p(
                np.exp(ops.convert_to_numpy(layer.temperature_logit) + 0.5)
            )
            + 1e-4
        )
        self.assertAllClose(
            out["template_logits"],
            ops.convert_to_numpy(warp_templates(templates, poses, (12, 12)))
            / temperature,
            atol=1e-5,
        )

    def test_config_round_trip(self):
        layer = TemplateDecoder(
            output_size=(28, 28),
            num_parts=4,
            template_size=(7, 7),
            channels=3,
            color_activation="relu1",
            seed=5,
        )
        clone = TemplateDecoder.from_config(layer.get_config())
        self.assertEqual(clone.get_config(), layer.get_config())

    def test_rejects_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "template_activation"):
            TemplateDecoder(template_activation="relu")
        with self.assertRaisesRegex(ValueError, "features"):
            TemplateDecoder(num_parts=3)(_poses(num=3))
        with self.assertRaisesRegex(ValueError, "poses.shape"):
            TemplateDecoder(num_parts=3)(_poses(num=4), _features(num=4))
