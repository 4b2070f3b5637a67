import numpy as np
from absl.testing import parameterized

from keras_capsules.ops import capsule_sparsity
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references

pytestmark = backend_marks.EAGER


def _presence(shape=(16, 32), seed=0):
    return np.random.default_rng(seed).uniform(size=shape).astype("float32")


class CapsuleSparsityTest(TestCase):
    @parameterized.named_parameters(
        ("l2", "l2", None),
        ("l2_constant", "l2", 4.3),
        ("entropy", "entropy", None),
    )
    def test_matches_the_official_losses(self, kind, constant):
        presence = _presence()
        presence[3] = 0.0
        within, between = capsule_sparsity(
            presence, kind, within_example_constant=constant
        )
        expected_within, expected_between = references.scae_sparsity(
            presence, kind, within_constant=constant or 0.0
        )
        if kind == "l2":
            # The official function returns the l2 between-example term
            # negated, for the model to subtract.
            expected_between = -expected_between
        self.assertAllClose(within, expected_within, rtol=1e-5)
        self.assertAllClose(between, expected_between, rtol=1e-5)

    def test_num_classes(self):
        presence = _presence()
        within, between = capsule_sparsity(presence, "l2", num_classes=4)
        expected = references.scae_sparsity(presence, "l2", num_classes=4)
        self.assertAllClose(within, expected[0], rtol=1e-5)
        self.assertAllClose(between, -expected[1], rtol=1e-5)

    def test_entropy_bounds(self):
        # One capsule per example, a different one each: no within-example
        # entropy, the most between-example entropy.
        presence = np.eye(8, dtype="float32")
        within, between = capsule_sparsity(presence, "entropy")
        self.assertAllClose(within, 0.0, atol=1e-6)
        self.assertAllClose(between, np.log(8), rtol=1e-5)

    @parameterized.named_parameters(("l2", "l2"), ("entropy", "entropy"))
    def test_zero_presence_is_finite(self, kind):
        self.assertAllFinite(capsule_sparsity(np.zeros((4, 6)), kind))

    def test_rejects_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "kind"):
            capsule_sparsity(_presence(), "kl")
        with self.assertRaisesRegex(ValueError, r"presence.shape=\(32,\)"):
            capsule_sparsity(_presence()[0])
        with self.assertRaisesRegex(ValueError, "within_example_constant"):
            capsule_sparsity(_presence(), within_example_constant=-1.0)
