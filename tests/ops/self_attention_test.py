import keras
import numpy as np
from absl.testing import parameterized
from keras import ops

from keras_capsules.ops import self_attention_routing
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references
from tests.ops import routing_cases

pytestmark = backend_marks.EAGER


class SelfAttentionRoutingTest(TestCase):
    @parameterized.named_parameters(
        ("small", (2, 5, 4, 3), False, "exponential"),
        ("mnist_sizes", (3, 16, 10, 16), False, "exponential"),
        ("with_prior", (2, 5, 4, 3), True, "exponential"),
        ("rational_squash", (2, 5, 4, 3), True, "rational"),
    )
    def test_matches_the_authors_equations(self, shape, with_prior, form):
        votes = routing_cases.random_votes(shape)
        prior = None
        if with_prior:
            prior = routing_cases.random_votes(shape[1:3], scale=0.3, seed=1)
        outputs, coupling = self_attention_routing(
            votes, prior=prior, squash_form=form, return_coupling=True
        )
        expected, expected_coupling = references.self_attention_routing(
            votes, prior=prior, squash_form=form
        )
        self.assertEqual(tuple(outputs.shape), (shape[0],) + shape[2:])
        self.assertAllClose(outputs, expected, atol=1e-5, rtol=1e-4)
        self.assertAllClose(coupling, expected_coupling, atol=1e-5)

    def test_leading_dimensions(self):
        votes = routing_cases.random_votes((2, 3, 5, 4, 3))
        outputs = self_attention_routing(votes)
        expected, _ = references.self_attention_routing(
            votes.reshape((6, 5, 4, 3))
        )
        self.assertAllClose(
            outputs, expected.reshape((2, 3, 4, 3)), atol=1e-5, rtol=1e-4
        )

    def test_coupling_without_prior_sums_to_one_over_parents(self):
        _, coupling = self_attention_routing(
            routing_cases.random_votes((2, 7, 4, 3)), return_coupling=True
        )
        self.assertAllClose(ops.sum(coupling, axis=-1), np.ones((2, 7)))

    def test_agreeing_votes_get_more_weight(self):
        # Parent 0 receives three equal votes and one opposite; the
        # opposite child then sends most of its weight to parent 1.
        votes = np.zeros((1, 4, 2, 2), dtype="float32")
        votes[0, :3, 0] = [1.0, 0.0]
        votes[0, 3, 0] = [-1.0, 0.0]
        votes[0, :, 1] = [0.0, 0.5]
        _, coupling = self_attention_routing(votes, return_coupling=True)
        coupling = ops.convert_to_numpy(coupling)[0]
        self.assertTrue(np.all(coupling[:3, 0] > 0.5))
        self.assertLess(coupling[3, 0], 0.5)

    @parameterized.named_parameters(
        ("zero", "zero"), ("identical", "identical"), ("large", "large")
    )
    def test_degenerate_votes_stay_finite(self, kind):
        votes = routing_cases.degenerate_votes(kind)
        outputs, coupling = self_attention_routing(votes, return_coupling=True)
        self.assertAllFinite([outputs, coupling])
        lengths = np.linalg.norm(ops.convert_to_numpy(outputs), axis=-1)
        self.assertTrue(np.all(lengths <= 1.0 + 1e-6))
        expected, expected_coupling = references.self_attention_routing(votes)
        # Votes of 1e4 give logits of ~1e8: only checked loosely there.
        atol = 1e-2 if kind == "large" else 1e-5
        self.assertAllClose(outputs, expected, atol=atol, rtol=atol)
        self.assertAllClose(coupling, expected_coupling, atol=atol)

    @backend_marks.COMPILED
    def test_degenerate_votes_gradient_step_is_finite(self):
        updated, predictions = routing_cases.fit_one_step(
            self_attention_routing,
            *[
                (routing_cases.degenerate_votes(kind), {"prior": prior})
                for kind in ("zero", "identical", "large")
                for prior in (None, np.full((6, 4), 0.1, dtype="float32"))
            ],
        )
        self.assertAllFinite(updated)
        self.assertAllFinite(predictions)

    @parameterized.named_parameters(
        ("float16", "float16"), ("bfloat16", "bfloat16")
    )
    def test_half_precision_votes(self, dtype):
        votes = routing_cases.random_votes((2, 5, 4, 3), scale=300.0)
        outputs, coupling = self_attention_routing(
            ops.cast(votes, dtype), return_coupling=True
        )
        for tensor in (outputs, coupling):
            self.assertEqual(
                keras.backend.standardize_dtype(tensor.dtype), dtype
            )
        outputs = ops.cast(outputs, "float32")
        self.assertAllFinite(outputs)
        expected, _ = references.self_attention_routing(
            ops.convert_to_numpy(ops.cast(ops.cast(votes, dtype), "float32"))
        )
        self.assertAllClose(outputs, expected, atol=2e-2, rtol=2e-2)

    def test_symbolic_votes(self):
        outputs = self_attention_routing(keras.Input(shape=(3, 5, 4, 2)))
        self.assertEqual(tuple(outputs.shape), (None, 3, 4, 2))

    def test_low_rank_votes_raise(self):
        with self.assertRaisesRegex(
            ValueError,
            r"Argument votes must have rank >= 3.*"
            r"Received: votes\.shape=\(4, 2\)$",
        ):
            self_attention_routing(routing_cases.random_votes((4, 2)))

    def test_mismatched_prior_raises(self):
        with self.assertRaisesRegex(
            ValueError,
            r"Argument prior must broadcast to .* \(5, 4\)\. "
            r"Received: prior\.shape=\(4, 5\)$",
        ):
            self_attention_routing(
                routing_cases.random_votes((2, 5, 4, 3)),
                prior=np.zeros((4, 5), "float32"),
            )

    def test_unknown_squash_form_raises(self):
        with self.assertRaisesRegex(
            ValueError, r"squash_form.*Received: squash_form=hinton$"
        ):
            self_attention_routing(
                routing_cases.random_votes((2, 5, 4, 3)), squash_form="hinton"
            )
