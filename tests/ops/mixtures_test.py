import numpy as np
from absl.testing import parameterized
from keras import ops

from keras_capsules.ops import part_pose_log_likelihood
from keras_capsules.ops import template_mixture_log_likelihood
from keras_capsules.ops import template_mixture_mode
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import gradients
from tests import references

pytestmark = backend_marks.EAGER


def _random(shape, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype("float32")


def _uniform(shape, seed=0):
    return np.random.default_rng(seed).uniform(size=shape).astype("float32")


def _image_case(channels=1, logit_channels=1, batch=2, num=4, size=6):
    images = _uniform((batch, size, size, channels), seed=1)
    templates = _uniform((batch, num, size, size, channels), seed=2)
    logits = _random((batch, num, size, size, logit_channels), seed=3)
    presence = _uniform((batch, num), seed=4)
    presence[0, 1] = 0.0  # An absent part: log presence is -1e8.
    presence[-1, -1] = 1e-20
    return images, templates, logits, presence, 0.3, -0.4


def _part_case(batch=2, num_objects=3, num_parts=5, dim=6, seed=0):
    parts = _random((batch, num_parts, dim), seed=seed)
    votes = parts[:, None] + _random(
        (batch, num_objects, num_parts, dim), seed=seed + 1, scale=0.5
    )
    scales = 0.5 + _uniform((batch, num_objects, num_parts), seed=seed + 2)
    vote_presence = _uniform((batch, num_objects, num_parts), seed=seed + 3)
    vote_presence[0, 1] = 0.0
    part_presence = _uniform((batch, num_parts), seed=seed + 4)
    return parts, votes, scales, vote_presence, part_presence


class TemplateMixtureTest(TestCase):
    @parameterized.named_parameters(
        ("grey", 1, 1), ("colour_shared_logits", 3, 1), ("colour", 3, 3)
    )
    def test_matches_the_official_mixture(self, channels, logit_channels):
        case = _image_case(channels, logit_channels)
        log_likelihood = template_mixture_log_likelihood(*case)
        expected = references.scae_image_log_likelihood(*case)
        self.assertEqual(tuple(log_likelihood.shape), case[0].shape)
        self.assertAllClose(log_likelihood, expected, atol=1e-5, rtol=1e-5)
        mode = template_mixture_mode(*case[1:])
        self.assertAllClose(
            mode, references.scae_image_mode(*case[1:]), atol=1e-6
        )

    def test_scale(self):
        case = _image_case()
        log_likelihood = template_mixture_log_likelihood(*case, scale=0.25)
        expected = references.scae_image_log_likelihood(*case, scale=0.25)
        self.assertAllClose(log_likelihood, expected, atol=1e-5, rtol=1e-5)

    def test_absent_parts_leave_only_the_background(self):
        images, templates, logits, presence, bg, bg_logit = _image_case()
        log_likelihood = template_mixture_log_likelihood(
            images, templates, logits, np.zeros_like(presence), bg, bg_logit
        )
        background_only = -0.5 * (images - bg) ** 2 - 0.5 * np.log(2 * np.pi)
        self.assertAllClose(log_likelihood, background_only, atol=1e-5)
        mode = template_mixture_mode(
            templates, logits, np.zeros_like(presence), bg, bg_logit
        )
        self.assertAllClose(mode, np.full(images.shape, bg), atol=1e-6)

    def test_per_pixel_background(self):
        images, templates, logits, presence, _, _ = _image_case()
        background = _uniform(images.shape[:1] + (1,) + images.shape[1:], 5)
        background_logit = _random(logits[:, :1].shape, seed=6)
        case = (images, templates, logits, presence)
        case += (background, background_logit)
        self.assertAllClose(
            template_mixture_log_likelihood(*case),
            references.scae_image_log_likelihood(*case),
            atol=1e-5,
            rtol=1e-5,
        )

    def test_large_logits_stay_finite(self):
        images, templates, logits, presence, bg, bg_logit = _image_case()
        for factor in (1e4, -1e4):
            case = (images, templates, logits * factor, presence, bg)

            def loss(x, case=case):
                return ops.sum(template_mixture_log_likelihood(*case, x))

            log_likelihood = template_mixture_log_likelihood(*case, bg_logit)
            expected = references.scae_image_log_likelihood(*case, bg_logit)
            self.assertAllClose(log_likelihood, expected, atol=1e-3)
            grad = gradients.gradient(loss, np.float32(bg_logit))
            self.assertTrue(np.isfinite(np.asarray(grad)).all())

    def test_gradient_with_respect_to_the_templates(self):
        images, templates, logits, presence, bg, bg_logit = _image_case(
            batch=1, num=2, size=3
        )

        def loss(x):
            return ops.sum(
                template_mixture_log_likelihood(
                    images, x, logits, presence, bg, bg_logit
                )
            )

        def reference_loss(x):
            return np.sum(
                references.scae_image_log_likelihood(
                    images, x, logits, presence, bg, bg_logit
                )
            )

        grad = gradients.gradient(loss, templates)
        expected = gradients.finite_difference(reference_loss, templates)
        self.assertAllClose(grad, expected, atol=1e-4, rtol=1e-3)

    def test_rejects_mismatched_shapes(self):
        images, templates, logits, presence, bg, bg_logit = _image_case()
        with self.assertRaisesRegex(ValueError, "presence.shape"):
            template_mixture_log_likelihood(
                images, templates, logits, presence[:, :2], bg, bg_logit
            )
        with self.assertRaisesRegex(ValueError, "template_logits.shape"):
            template_mixture_mode(
                templates, logits[:, :, :3], presence, bg, bg_logit
            )
        with self.assertRaisesRegex(ValueError, "images.shape"):
            template_mixture_log_likelihood(
                images[:, :3], templates, logits, presence, bg, bg_logit
            )
        with self.assertRaisesRegex(ValueError, "scale"):
            template_mixture_log_likelihood(
                images, templates, logits, presence, bg, bg_logit, scale=0.0
            )


class PartPoseLikelihoodTest(TestCase):
    @parameterized.named_parameters(
        ("official", True, False),
        ("without_part_presence", False, False),
        ("normalized_mixing", True, True),
    )
    def test_matches_the_official_likelihood(self, weighted, normalize):
        parts, votes, scales, vote_presence, part_presence = _part_case()
        if not weighted:
            part_presence = None
        log_likelihood, posterior, winners = part_pose_log_likelihood(
            parts,
            votes,
            scales,
            vote_presence,
            part_presence,
            normalize_mixing=normalize,
            return_winners=True,
        )
        expected = references.scae_part_likelihood(
            parts, votes, scales, vote_presence, part_presence, normalize
        )
        self.assertAllClose(log_likelihood, expected[0], atol=1e-4, rtol=1e-5)
        self.assertAllClose(posterior, expected[1], atol=1e-5)
        self.assertAllClose(winners, expected[2], atol=1e-6)

    def test_mnist_sizes(self):
        case = _part_case(batch=2, num_objects=32, num_parts=40)
        log_likelihood, posterior = part_pose_log_likelihood(*case)
        expected = references.scae_part_likelihood(*case)
        self.assertEqual(tuple(posterior.shape), (2, 40, 32))
        self.assertAllClose(log_likelihood, expected[0], atol=1e-3, rtol=1e-5)
        self.assertAllClose(posterior, expected[1], atol=1e-5)

    def test_far_votes_fall_to_the_dummy_and_stay_finite(self):
        parts, votes, scales, vote_presence, part_presence = _part_case()
        log_likelihood, posterior = part_pose_log_likelihood(
            parts, votes + 1e4, scales * 1e-3, np.zeros_like(vote_presence)
        )
        self.assertAllFinite([log_likelihood, posterior])
        # Only the dummy is left: log(0.01) + log(0.01) per part.
        self.assertAllClose(
            log_likelihood, np.full(2, 5 * -4 * np.log(10)), rtol=1e-6
        )
        self.assertAllClose(posterior, np.zeros(posterior.shape), atol=1e-6)

    def test_gradient_with_respect_to_the_votes(self):
        parts, votes, scales, vote_presence, part_presence = _part_case(
            batch=1, num_objects=2, num_parts=3, dim=2
        )

        def loss(x):
            return ops.sum(
                part_pose_log_likelihood(
                    parts, x, scales, vote_presence, part_presence
                )[0]
            )

        def reference_loss(x):
            return references.scae_part_likelihood(
                parts, x, scales, vote_presence, part_presence
            )[0].sum()

        grad = gradients.gradient(loss, votes)
        expected = gradients.finite_difference(reference_loss, votes)
        self.assertAllClose(grad, expected, atol=1e-4, rtol=1e-3)

    def test_rejects_mismatched_shapes(self):
        parts, votes, scales, vote_presence, part_presence = _part_case()
        with self.assertRaisesRegex(ValueError, "votes.shape"):
            part_pose_log_likelihood(parts, votes[:, :, :2], scales, scales)
        with self.assertRaisesRegex(ValueError, "vote_scales.shape"):
            part_pose_log_likelihood(parts, votes, scales[:, :2], scales)
        with self.assertRaisesRegex(ValueError, "part_presence.shape"):
            part_pose_log_likelihood(
                parts, votes, scales, vote_presence, part_presence[:, :2]
            )
        with self.assertRaisesRegex(ValueError, "part_poses.shape"):
            part_pose_log_likelihood(parts[0], votes, scales, scales)


class TemplateMixtureComponentsTest(TestCase):
    def test_components_are_the_winners(self):
        images, templates, logits, presence, bg, bg_logit = _image_case()
        mode, components = template_mixture_mode(
            templates, logits, presence, bg, bg_logit, return_components=True
        )
        components = ops.convert_to_numpy(components)
        self.assertEqual(components.shape, images.shape)
        padded = np.concatenate(
            [templates, np.full_like(templates[:, :1], bg)], axis=1
        )
        chosen = np.take_along_axis(padded, components[:, None], axis=1)[:, 0]
        self.assertAllClose(mode, chosen, atol=1e-6)
        # The absent part never wins.
        self.assertFalse(np.any(components[0] == 1))
