import keras
import numpy as np
from absl.testing import parameterized
from keras import ops

from keras_capsules.ops import dynamic_routing
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references
from tests.ops import routing_cases

pytestmark = backend_marks.EAGER


def _fit_one_step(*cases):
    return routing_cases.fit_one_step(dynamic_routing, *cases)


class DynamicRoutingTest(TestCase):
    @parameterized.named_parameters(
        ("batch_1_iteration", (2, 5, 4, 3), 1),
        ("batch_3_iterations", (2, 5, 4, 3), 3),
        ("grid_1_iteration", (2, 3, 5, 4, 3), 1),
        ("grid_3_iterations", (2, 3, 5, 4, 3), 3),
        ("no_leading_dims", (6, 2, 4), 3),
        ("many_iterations", (2, 7, 3, 5), 5),
        # Rank-6 logits: TensorFlow's oneDNN softmax kernel stops at rank 5.
        ("rank_7_votes", (2, 1, 2, 2, 5, 4, 3), 2),
    )
    def test_matches_procedure_1(self, shape, iterations):
        votes = routing_cases.random_votes(shape)
        expected, expected_coupling = references.dynamic_routing(
            votes, iterations
        )
        outputs, coupling = dynamic_routing(
            votes, routing_iterations=iterations, return_coupling=True
        )
        self.assertEqual(tuple(outputs.shape), shape[:-3] + shape[-2:])
        self.assertEqual(tuple(coupling.shape), shape[:-1])
        self.assertAllClose(outputs, expected, atol=1e-5, rtol=1e-5)
        self.assertAllClose(coupling, expected_coupling, atol=1e-5, rtol=1e-5)

    def test_single_iteration_is_uniform_coupling(self):
        votes = routing_cases.random_votes((2, 5, 4, 3))
        outputs, coupling = dynamic_routing(
            votes, routing_iterations=1, return_coupling=True
        )
        self.assertAllClose(coupling, np.full((2, 5, 4), 0.25))
        self.assertAllClose(
            outputs, references.squash(votes.sum(axis=1) / 4.0), atol=1e-6
        )

    def test_default_is_three_iterations(self):
        votes = routing_cases.random_votes((2, 5, 4, 3))
        self.assertAllClose(
            dynamic_routing(votes),
            references.dynamic_routing(votes, 3)[0],
            atol=1e-5,
            rtol=1e-5,
        )

    def test_coupling_sums_to_one_over_outputs(self):
        votes = routing_cases.random_votes((3, 6, 5, 4), scale=3.0)
        _, coupling = dynamic_routing(votes, return_coupling=True)
        coupling = ops.convert_to_numpy(coupling)
        self.assertAllClose(coupling.sum(axis=-1), np.ones((3, 6)), atol=1e-6)
        self.assertTrue(np.all(coupling >= 0.0))

    def test_agreement_raises_coupling_to_agreeing_output(self):
        # Every input votes (1, 0) for output 0 and random noise elsewhere,
        # so routing must concentrate the coupling on output 0.
        votes = routing_cases.random_votes((1, 8, 3, 2), scale=0.1)
        votes[:, :, 0, :] = [1.0, 0.0]
        _, coupling = dynamic_routing(
            votes, routing_iterations=3, return_coupling=True
        )
        coupling = ops.convert_to_numpy(coupling)
        self.assertTrue(np.all(coupling[..., 0] > coupling[..., 1]))
        self.assertTrue(np.all(coupling[..., 0] > 1.0 / 3.0))

    @parameterized.named_parameters(
        ("full", (4, 3)), ("per_dim", (3,)), ("scalar", ())
    )
    def test_bias_matches_reference(self, bias_shape):
        votes = routing_cases.random_votes((2, 5, 4, 3))
        bias = np.full(bias_shape, 0.1, dtype="float32")
        bias = bias + routing_cases.random_votes(bias_shape, scale=0.05, seed=1)
        expected, expected_coupling = references.dynamic_routing(
            votes, 3, bias=bias
        )
        outputs, coupling = dynamic_routing(
            votes, bias=bias, return_coupling=True
        )
        self.assertAllClose(outputs, expected, atol=1e-5, rtol=1e-5)
        self.assertAllClose(coupling, expected_coupling, atol=1e-5, rtol=1e-5)
        self.assertFalse(
            np.allclose(expected, references.dynamic_routing(votes, 3)[0])
        )

    @parameterized.named_parameters(("1_iteration", 1), ("3_iterations", 3))
    def test_leaky_matches_reference(self, iterations):
        votes = routing_cases.random_votes((2, 3, 5, 4, 3))
        expected, expected_coupling = references.dynamic_routing(
            votes, iterations, leaky=True
        )
        outputs, coupling = dynamic_routing(
            votes,
            routing_iterations=iterations,
            leaky_routing=True,
            return_coupling=True,
        )
        self.assertAllClose(outputs, expected, atol=1e-5, rtol=1e-5)
        self.assertAllClose(coupling, expected_coupling, atol=1e-5, rtol=1e-5)
        # The dropped "dustbin" share leaves less than 1 for real outputs.
        self.assertTrue(
            np.all(ops.convert_to_numpy(coupling).sum(axis=-1) < 1.0)
        )

    def test_leaky_with_bias_matches_reference(self):
        votes = routing_cases.random_votes((2, 5, 4, 3))
        bias = np.full((4, 3), 0.1, dtype="float32")
        expected, _ = references.dynamic_routing(
            votes, 3, bias=bias, leaky=True
        )
        outputs = dynamic_routing(votes, bias=bias, leaky_routing=True)
        self.assertAllClose(outputs, expected, atol=1e-5, rtol=1e-5)

    @parameterized.named_parameters(
        ("plain", {}),
        (
            "leaky_bias",
            {"leaky_routing": True, "bias": np.full((4, 3), 0.1)},
        ),
    )
    def test_stop_gradient_keeps_forward_values(self, kwargs):
        votes = routing_cases.random_votes((2, 5, 4, 3))
        outputs, coupling = dynamic_routing(
            votes, return_coupling=True, **kwargs
        )
        stopped, stopped_coupling = dynamic_routing(
            votes, stop_gradient=True, return_coupling=True, **kwargs
        )
        self.assertAllClose(stopped, outputs)
        self.assertAllClose(stopped_coupling, coupling)

    @backend_marks.COMPILED
    def test_stop_gradient_changes_only_multi_iteration_gradients(self):
        votes = routing_cases.random_votes((1, 4, 3, 2))
        (plain, stopped, plain_once, stopped_once), _ = _fit_one_step(
            (votes, {"routing_iterations": 3}),
            (votes, {"routing_iterations": 3, "stop_gradient": True}),
            (votes, {"routing_iterations": 1}),
            (votes, {"routing_iterations": 1, "stop_gradient": True}),
        )
        self.assertAllFinite([plain, stopped])
        self.assertFalse(np.allclose(plain, votes))
        self.assertFalse(np.allclose(stopped, votes))
        self.assertFalse(np.allclose(plain, stopped, atol=1e-7, rtol=0))
        # With one iteration there is no agreement update to stop.
        self.assertAllClose(stopped_once, plain_once)

    @parameterized.named_parameters(
        ("zero", "zero", False),
        ("zero_leaky", "zero", True),
        ("identical", "identical", False),
        ("identical_leaky", "identical", True),
        ("large", "large", False),
        ("large_leaky", "large", True),
    )
    def test_degenerate_votes_stay_finite(self, kind, leaky):
        votes = routing_cases.degenerate_votes(kind)
        outputs, coupling = dynamic_routing(
            votes, leaky_routing=leaky, return_coupling=True
        )
        self.assertAllFinite([outputs, coupling])
        lengths = np.linalg.norm(ops.convert_to_numpy(outputs), axis=-1)
        self.assertTrue(np.all(lengths <= 1.0 + 1e-6))
        expected, expected_coupling = references.dynamic_routing(
            votes, 3, leaky=leaky
        )
        # Votes of 1e4 give logits of ~1e5, where float32 rounding may move
        # a saturated softmax, so those are only checked loosely.
        atol = 1e-2 if kind == "large" else 1e-5
        self.assertAllClose(outputs, expected, atol=atol, rtol=atol)
        self.assertAllClose(coupling, expected_coupling, atol=atol)

    @backend_marks.COMPILED
    def test_degenerate_votes_gradient_step_is_finite(self):
        variants = (
            {},
            {"leaky_routing": True},
            {"stop_gradient": True},
            {"bias": np.full((4, 3), 0.1, dtype="float32")},
        )
        updated, predictions = _fit_one_step(
            *[
                (routing_cases.degenerate_votes(kind), kwargs)
                for kind in ("zero", "identical", "large")
                for kwargs in variants
            ]
        )
        self.assertAllFinite(updated)
        self.assertAllFinite(predictions)

    @parameterized.named_parameters(
        ("float16", "float16"), ("bfloat16", "bfloat16")
    )
    def test_half_precision_votes(self, dtype):
        votes = routing_cases.random_votes((2, 5, 4, 3), scale=300.0)
        outputs, coupling = dynamic_routing(
            ops.cast(votes, dtype), return_coupling=True
        )
        for tensor in (outputs, coupling):
            self.assertEqual(
                keras.backend.standardize_dtype(tensor.dtype), dtype
            )
        outputs = ops.cast(outputs, "float32")
        self.assertAllFinite(outputs)
        expected, _ = references.dynamic_routing(
            ops.convert_to_numpy(ops.cast(ops.cast(votes, dtype), "float32")),
            3,
        )
        self.assertAllClose(outputs, expected, atol=2e-2, rtol=2e-2)

    def test_symbolic_votes(self):
        outputs = dynamic_routing(keras.Input(shape=(3, 5, 4, 2)))
        self.assertEqual(tuple(outputs.shape), (None, 3, 4, 2))

    @parameterized.named_parameters(
        ("zero", 0), ("negative", -2), ("float", 1.5), ("bool", True)
    )
    def test_invalid_iterations_raise(self, iterations):
        with self.assertRaisesRegex(
            ValueError,
            r"Argument routing_iterations must be a positive integer\. "
            rf"Received: routing_iterations={iterations}$",
        ):
            dynamic_routing(
                routing_cases.random_votes((2, 3, 4, 2)),
                routing_iterations=iterations,
            )

    def test_low_rank_votes_raise(self):
        with self.assertRaisesRegex(
            ValueError,
            r"Argument votes must have rank >= 3.*"
            r"Received: votes\.shape=\(4, 2\)$",
        ):
            dynamic_routing(routing_cases.random_votes((4, 2)))

    def test_mismatched_bias_raises(self):
        with self.assertRaisesRegex(
            ValueError,
            r"Argument bias must broadcast to .* \(4, 3\)\. "
            r"Received: bias\.shape=\(5, 3\)$",
        ):
            dynamic_routing(
                routing_cases.random_votes((2, 5, 4, 3)),
                bias=np.zeros((5, 3), "float32"),
            )
