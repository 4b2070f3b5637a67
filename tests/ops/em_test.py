import inspect

import keras
import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules import layers
from keras_capsules import models
from keras_capsules import ops as capsule_ops
from keras_capsules.ops._tiles import tiling
from keras_capsules.ops._tiles import tiling_sizes
from keras_capsules.ops.em import _core
from keras_capsules.ops.em import _vote_layouts
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references
from tests.compiled import compiled

pytestmark = backend_marks.EAGER


def _conv_connectivity(grid, num_in, kernel, strides, padding, num_out):
    """Child/parent index maps of a convolutional capsule layer.

    Returns `(out_size, entries)` where `entries` lists, for every window
    entry `(i, j, u, v, c)` that holds a real child, the child index on the
    input grid and the window index.
    """
    height, width = grid
    if padding == "same":
        out_h, out_w = -(-height // strides), -(-width // strides)
        top = max((out_h - 1) * strides + kernel - height, 0) // 2
        left = max((out_w - 1) * strides + kernel - width, 0) // 2
    else:
        out_h = (height - kernel) // strides + 1
        out_w = (width - kernel) // strides + 1
        top = left = 0
    entries = []
    for i in range(out_h):
        for j in range(out_w):
            for u in range(kernel):
                for v in range(kernel):
                    row, col = i * strides + u - top, j * strides + v - left
                    if not (0 <= row < height and 0 <= col < width):
                        continue
                    for c in range(num_in):
                        entries.append(
                            (
                                (i, j, (u * kernel + v) * num_in + c),
                                (row * width + col) * num_in + c,
                                i * out_w + j,
                            )
                        )
    return (out_h, out_w), entries


def _dense_from_conv(votes, entries, num_children, num_windows):
    """Scatters window votes into a dense (child, parent) layout."""
    batch, _, _, _, num_out, dim = votes.shape
    dense = np.zeros((batch, num_children, num_windows, num_out, dim))
    connected = np.zeros((num_children, num_windows, num_out))
    for (i, j, k), child, window in entries:
        dense[:, child, window] = votes[:, i, j, k]
        connected[child, window] = 1.0
    return (
        dense.reshape(batch, num_children, num_windows * num_out, dim),
        connected.reshape(num_children, num_windows * num_out),
    )


def _betas(num_out, mode="official"):
    # Scaled so that every term of the activation logit matters: the
    # official form multiplies beta_a by 5000 and beta_v by D (log 2pi + 1).
    rng = np.random.default_rng(4)
    if mode == "official":
        return (
            rng.uniform(0.02, 0.1, num_out).astype("float32"),
            rng.uniform(-2e-3, 2e-3, num_out).astype("float32"),
        )
    return (
        rng.uniform(0.2, 1.0, num_out).astype("float32"),
        rng.uniform(0.2, 1.0, num_out).astype("float32"),
    )


class _RoutingProbe(keras.layers.Layer):
    """Runs an EM routing op on scaled inputs, to train through it."""

    def __init__(self, conv, **kwargs):
        super().__init__(**kwargs)
        self.conv = conv

    def build(self, input_shape):
        self.scale = self.add_weight(name="scale", shape=(), initializer="ones")
        self.gate = self.add_weight(name="gate", shape=(), initializer="ones")
        num_out = input_shape[0][-2]
        self.beta_v = self.add_weight(
            name="beta_v", shape=(num_out,), initializer="ones"
        )
        self.beta_a = self.add_weight(
            name="beta_a", shape=(num_out,), initializer="ones"
        )

    def call(self, inputs):
        votes, activations = inputs
        votes = votes * self.scale
        activations = activations * self.gate
        if self.conv:
            poses, probabilities = capsule_ops.em_conv_routing(
                votes, activations, self.beta_v, self.beta_a, 3, 1
            )
        else:
            poses, probabilities = capsule_ops.em_routing(
                votes, activations, self.beta_v, self.beta_a
            )
        return [poses, probabilities]


class EMRoutingTest(TestCase):
    @parameterized.named_parameters(
        ("official_1", "official", 1),
        ("official_2", "official", 2),
        ("official_3", "official", 3),
        ("paper_1", "paper", 1),
        ("paper_2", "paper", 2),
        ("paper_3", "paper", 3),
    )
    def test_matches_numpy(self, mode, iterations):
        rng = np.random.default_rng(0)
        votes = rng.normal(size=(3, 6, 3, 16)).astype("float32")
        activations = rng.uniform(size=(3, 6)).astype("float32")
        beta_v, beta_a = _betas(3, mode)
        # Larger temperatures than the official 0.01 make the activations,
        # and through them the E-step, depend visibly on every term.
        final_lambda = 1.0 if mode == "official" else 0.5
        poses, probs, assignments = capsule_ops.em_routing(
            votes,
            activations,
            beta_v,
            beta_a,
            routing_iterations=iterations,
            final_lambda=final_lambda,
            routing_mode=mode,
            return_assignments=True,
        )
        expected = references.em_routing(
            votes,
            activations,
            np.ones((6, 3)),
            beta_v,
            beta_a,
            iterations,
            final_lambda=final_lambda,
            mode=mode,
        )
        self.assertAllClose(poses, expected[0], atol=2e-5, rtol=1e-4)
        self.assertAllClose(probs, expected[1], atol=2e-5, rtol=1e-4)
        self.assertAllClose(assignments, expected[2], atol=2e-5, rtol=1e-4)
        if iterations > 1:
            # The E-step moved the assignments away from uniform.
            self.assertGreater(
                np.abs(keras.ops.convert_to_numpy(assignments) - 1 / 3).max(),
                0.05,
            )

    @parameterized.named_parameters(
        ("one_axis", (2, 3)),
        # Rank-7 log-likelihoods: TensorFlow's oneDNN softmax kernel stops
        # at rank 5.
        ("four_axes", (2, 1, 3, 2)),
    )
    def test_leading_axes_and_defaults(self, leading):
        rng = np.random.default_rng(1)
        votes = rng.normal(size=leading + (5, 4, 16)).astype("float32")
        activations = rng.uniform(size=leading + (5,)).astype("float32")
        beta_v, beta_a = _betas(4)
        poses, probs = capsule_ops.em_routing(
            votes, activations, beta_v, beta_a
        )
        self.assertShapeEqual(poses.shape, leading + (4, 16))
        self.assertShapeEqual(probs.shape, leading + (4,))
        # The defaults: 2 iterations, final_lambda 1e-3, the paper's forms.
        expected = references.em_routing(
            votes.reshape(-1, 5, 4, 16),
            activations.reshape(-1, 5),
            np.ones((5, 4)),
            beta_v,
            beta_a,
            2,
            final_lambda=1e-3,
            mode="paper",
        )
        self.assertAllClose(
            poses, expected[0].reshape(leading + (4, 16)), atol=1e-5, rtol=1e-4
        )
        self.assertAllClose(
            probs, expected[1].reshape(leading + (4,)), atol=1e-6, rtol=1e-4
        )

    def test_symbolic_unknown_batch(self):
        votes = keras.Input((6, 3, 16))
        activations = keras.Input((6,))
        poses, probs = capsule_ops.em_routing(
            votes, activations, np.ones(3), np.ones(3)
        )
        self.assertShapeEqual(poses.shape, (None, 3, 16))
        self.assertShapeEqual(probs.shape, (None, 3))

    def test_degenerate_inputs_are_finite(self):
        # One example per degenerate case: identical votes (zero variance),
        # all-zero activations, and poses of magnitude 1e4.
        votes, activations = _degenerate_batch((6, 3, 16), (6,))
        for mode in ("official", "paper"):
            outputs = capsule_ops.em_routing(
                votes,
                activations,
                np.ones(3, "float32"),
                np.ones(3, "float32"),
                routing_iterations=3,
                routing_mode=mode,
                return_assignments=True,
            )
            self.assertAllFinite(outputs, msg=mode)
            self.assertAllClose(
                np.sum(keras.ops.convert_to_numpy(outputs[2]), axis=-1),
                np.ones((3, 6)),
                atol=1e-5,
            )
            # With identical votes, every parent sits on the common vote (the
            # official mean keeps 10% of the previous one, starting at 0).
            expected = 0.999 if mode == "official" else 1.0
            self.assertAllClose(
                outputs[0][0], np.full((3, 16), expected), atol=1e-6
            )

    @backend_marks.COMPILED
    def test_gradient_step_is_finite(self):
        votes, activations = _degenerate_batch((6, 3, 16), (6,))
        _fit_probe(self, votes, activations, conv=False)

    def test_single_child(self):
        votes = np.random.default_rng(3).normal(size=(2, 1, 3, 16))
        votes = votes.astype("float32")
        activations = np.ones((2, 1), "float32")
        poses, probs = capsule_ops.em_routing(
            votes,
            activations,
            np.ones(3, "float32"),
            np.ones(3, "float32"),
            routing_mode="paper",
        )
        self.assertAllFinite([poses, probs])
        # One child: each parent's mean is that child's vote.
        self.assertAllClose(poses, votes[:, 0], atol=1e-5)

    @parameterized.named_parameters(
        ("float16", "float16"), ("bfloat16", "bfloat16")
    )
    def test_half_precision_inputs(self, dtype):
        rng = np.random.default_rng(4)
        votes = rng.normal(size=(3, 6, 3, 16)).astype("float32")
        activations = rng.uniform(size=(3, 6)).astype("float32")
        beta = np.ones(3, "float32")
        reference = capsule_ops.em_routing(votes, activations, beta, beta)
        half = capsule_ops.em_routing(
            keras.ops.cast(votes, dtype),
            keras.ops.cast(activations, dtype),
            beta,
            beta,
        )
        for value in half:
            self.assertEqual(
                keras.backend.standardize_dtype(value.dtype), dtype
            )
        half = [keras.ops.cast(h, "float32") for h in half]
        self.assertAllClose(half, reference, atol=0.05, rtol=0.05)
        # The routing maths runs in float32: degenerate inputs stay finite.
        votes, activations = _degenerate_batch((6, 3, 16), (6,))
        self.assertAllFinite(
            capsule_ops.em_routing(
                keras.ops.cast(votes, dtype),
                keras.ops.cast(activations, dtype),
                beta,
                beta,
            )
        )

    def test_errors(self):
        votes = np.zeros((2, 6, 3, 16), "float32")
        activations = np.zeros((2, 6), "float32")
        beta = np.ones(3, "float32")
        with self.assertRaisesRegex(
            ValueError,
            r"Argument routing_iterations must be a positive integer.*"
            r"Received: routing_iterations=0$",
        ):
            capsule_ops.em_routing(votes, activations, beta, beta, 0)
        with self.assertRaisesRegex(
            ValueError,
            r"Argument routing_mode must be .*Received: routing_mode=fast$",
        ):
            capsule_ops.em_routing(
                votes, activations, beta, beta, routing_mode="fast"
            )
        with self.assertRaisesRegex(
            ValueError, r"positive number.*Received: min_variance=0"
        ):
            capsule_ops.em_routing(
                votes, activations, beta, beta, min_variance=0
            )
        with self.assertRaisesRegex(
            ValueError, r"Received: activations.shape=\(2, 5\)"
        ):
            capsule_ops.em_routing(votes, activations[:, :5], beta, beta)
        with self.assertRaisesRegex(
            ValueError, r"broadcast to \(num_out,\).*Received: beta_a.shape"
        ):
            capsule_ops.em_routing(votes, activations, beta, np.ones(4))
        with self.assertRaisesRegex(
            ValueError, r"rank >= 3.*Received: votes.shape=\(6, 16\)"
        ):
            capsule_ops.em_routing(votes[0, :, 0], activations, beta, beta)


_CONV_CASES = (
    # name, grid, num_in, kernel, strides, padding, mode, iterations,
    # normalization
    ("k3_s1_official", (4, 4), 2, 3, 1, "valid", "official", 3, "window"),
    ("k3_s2_paper", (5, 5), 2, 3, 2, "valid", "paper", 3, "window"),
    ("k3_s2_same_window", (4, 4), 2, 3, 2, "same", "official", 2, "window"),
    ("k2_s1_paper_1", (3, 3), 1, 2, 1, "valid", "paper", 1, "window"),
    ("k3_s1_all", (4, 4), 2, 3, 1, "valid", "official", 3, "all_parents"),
    ("k3_s2_all_paper", (5, 5), 2, 3, 2, "valid", "paper", 3, "all_parents"),
    ("k3_s2_same_all", (4, 4), 2, 3, 2, "same", "official", 2, "all_parents"),
    ("k3_s1_per_type", (4, 4), 2, 3, 1, "valid", "official", 3, "official"),
    # Stride 2: the official code's stride-1 grouping would pair entries
    # of different children here; the reference groups by child.
    ("k3_s2_per_type", (5, 5), 2, 3, 2, "valid", "paper", 3, "official"),
    ("k3_s2_same_type", (4, 4), 2, 3, 2, "same", "official", 2, "official"),
)


class EMConvRoutingTest(TestCase):
    @parameterized.named_parameters(*_CONV_CASES)
    # One geometry per normalisation on every backend; the others, the same
    # index arithmetic, on the primary one.
    @pytest.mark.primary_backend(
        every_backend=("k3_s2_same_window", "k3_s1_all", "k3_s2_per_type")
    )
    def test_matches_dense_numpy(
        self,
        grid,
        num_in,
        kernel,
        strides,
        padding,
        mode,
        iterations,
        normalization,
    ):
        rng = np.random.default_rng(6)
        num_out, dim = 2, 16
        (out_h, out_w), entries = _conv_connectivity(
            grid, num_in, kernel, strides, padding, num_out
        )
        votes = rng.normal(
            size=(2, out_h, out_w, kernel * kernel * num_in, num_out, dim)
        ).astype("float32")
        activations = rng.uniform(size=(2,) + grid + (num_in,))
        activations = activations.astype("float32")
        beta_v, beta_a = _betas(num_out, mode)
        final_lambda = 1.0 if mode == "official" else 0.5
        poses, probs, assignments = capsule_ops.em_conv_routing(
            votes,
            activations,
            beta_v,
            beta_a,
            kernel,
            strides,
            padding,
            routing_iterations=iterations,
            final_lambda=final_lambda,
            routing_mode=mode,
            routing_normalization=normalization,
            return_assignments=True,
        )

        num_children = grid[0] * grid[1] * num_in
        child_activations = activations.reshape(2, num_children)
        if normalization == "window":
            # Every window routes its own children: a child seen by two
            # windows is two independent children.
            child_activations = np.stack(
                [child_activations[:, child] for _, child, _ in entries],
                axis=1,
            )
            entries = [
                (entry, index, window)
                for index, (entry, _, window) in enumerate(entries)
            ]
            num_children = len(entries)
        dense_votes, connected = _dense_from_conv(
            votes, entries, num_children, out_h * out_w
        )
        expected = references.em_routing(
            dense_votes,
            child_activations,
            connected,
            np.tile(beta_v, out_h * out_w),
            np.tile(beta_a, out_h * out_w),
            iterations,
            final_lambda=final_lambda,
            mode=mode,
            parent_types=np.tile(np.arange(num_out), out_h * out_w)
            if normalization == "official"
            else None,
        )
        self.assertAllClose(
            poses,
            expected[0].reshape(2, out_h, out_w, num_out, dim),
            atol=2e-5,
            rtol=1e-4,
        )
        self.assertAllClose(
            probs,
            expected[1].reshape(2, out_h, out_w, num_out),
            atol=2e-5,
            rtol=1e-4,
        )
        # Assignments, entry by entry, and their sums over every parent.
        assignments = keras.ops.convert_to_numpy(assignments)
        dense_r = expected[2].reshape(2, num_children, out_h * out_w, num_out)
        totals = np.zeros((2, num_children))
        for (i, j, k), child, window in entries:
            self.assertAllClose(
                assignments[:, i, j, k],
                dense_r[:, child, window],
                atol=2e-5,
                rtol=1e-4,
            )
            totals[:, child] += assignments[:, i, j, k].sum(axis=-1)
        # Each child's assignments sum to 1 over its parents; with the
        # official per-type normalisation, to 1 per type after the first
        # E-step (to the number of windows it sits in before it).
        if normalization == "official" and iterations > 1:
            expected_total = float(num_out)
        elif normalization == "official":
            expected_total = None
        else:
            expected_total = 1.0
        if expected_total is not None:
            self.assertAllClose(
                totals, np.full_like(totals, expected_total), atol=1e-5
            )

    @backend_marks.COMPILED
    def test_assignments_normalised_over_positions_and_types(self):
        # Large poses make log-probabilities of order -1e11: the per-child
        # shift must keep every child's assignments summing to exactly 1
        # over all the (position, type) parents it feeds.
        rng = np.random.default_rng(7)
        (out_h, out_w), entries = _conv_connectivity((5, 5), 2, 3, 1, "same", 3)
        votes = 1e4 * rng.normal(size=(2, out_h, out_w, 18, 3, 16))
        activations = rng.uniform(size=(2, 5, 5, 2)).astype("float32")
        outputs = compiled(
            capsule_ops.em_conv_routing,
            kernel_size=3,
            padding="same",
            routing_normalization="all_parents",
            return_assignments=True,
        )(
            votes.astype("float32"),
            activations,
            np.ones(3, "float32"),
            np.ones(3, "float32"),
        )
        self.assertAllFinite(outputs)
        assignments = keras.ops.convert_to_numpy(outputs[2])
        totals = np.zeros((2, 50))
        for (i, j, k), child, _ in entries:
            totals[:, child] += assignments[:, i, j, k].sum(axis=-1)
        self.assertAllClose(totals, np.ones_like(totals), atol=1e-5)
        # Padding entries carry no assignment.
        real = np.zeros(assignments.shape[1:4], bool)
        for (i, j, k), _, _ in entries:
            real[i, j, k] = True
        self.assertAllClose(assignments[:, ~real], 0.0, atol=0)

    @backend_marks.COMPILED
    def test_degenerate_inputs_are_finite(self):
        votes, activations = _degenerate_batch((2, 2, 18, 3, 16), (4, 4, 2))
        for mode in ("official", "paper"):
            outputs = compiled(
                capsule_ops.em_conv_routing, kernel_size=3, routing_mode=mode
            )(votes, activations, np.ones(3, "float32"), np.ones(3, "float32"))
            self.assertAllFinite(outputs, msg=mode)
        _fit_probe(self, votes, activations, conv=True)

    def test_half_precision_inputs(self):
        rng = np.random.default_rng(9)
        votes = rng.normal(size=(3, 2, 2, 18, 3, 16)).astype("float32")
        activations = rng.uniform(size=(3, 4, 4, 2)).astype("float32")
        beta = np.ones(3, "float32")
        reference = capsule_ops.em_conv_routing(
            votes, activations, beta, beta, 3
        )
        degenerate = _degenerate_batch((2, 2, 18, 3, 16), (4, 4, 2))
        for dtype in ("float16", "bfloat16"):
            half = capsule_ops.em_conv_routing(
                keras.ops.cast(votes, dtype),
                keras.ops.cast(activations, dtype),
                beta,
                beta,
                3,
            )
            for value in half:
                self.assertEqual(
                    keras.backend.standardize_dtype(value.dtype), dtype
                )
            half = [keras.ops.cast(h, "float32") for h in half]
            self.assertAllClose(half, reference, atol=0.05, rtol=0.05)
            self.assertAllFinite(
                capsule_ops.em_conv_routing(
                    keras.ops.cast(degenerate[0], dtype),
                    keras.ops.cast(degenerate[1], dtype),
                    beta,
                    beta,
                    3,
                )
            )

    def test_errors(self):
        activations = np.zeros((2, 4, 4, 2), "float32")
        votes = np.zeros((2, 2, 2, 18, 3, 16), "float32")
        beta = np.ones(3, "float32")
        with self.assertRaisesRegex(
            ValueError, r"votes must have shape.*Received: votes.shape"
        ):
            capsule_ops.em_conv_routing(
                votes, activations, beta, beta, 3, strides=2
            )
        with self.assertRaisesRegex(
            ValueError, r"activations must have shape.*Received: activations"
        ):
            capsule_ops.em_conv_routing(
                votes, activations[..., 0], beta, beta, 3
            )
        with self.assertRaisesRegex(
            ValueError, r"no output positions.*Received: kernel_size"
        ):
            capsule_ops.em_conv_routing(votes, activations, beta, beta, 5)


def _degenerate_batch(votes_shape, activations_shape):
    """Identical votes, zero activations and 1e4 poses, one example each."""
    rng = np.random.default_rng(8)
    votes = np.stack(
        [
            np.ones(votes_shape),
            rng.normal(size=votes_shape),
            1e4 * rng.normal(size=votes_shape),
        ]
    ).astype("float32")
    activations = np.stack(
        [
            np.ones(activations_shape),
            np.zeros(activations_shape),
            rng.uniform(size=activations_shape),
        ]
    ).astype("float32")
    return votes, activations


def _fit_probe(test, votes, activations, conv):
    """One SGD step through the routing; every weight must stay finite."""
    inputs = [
        keras.Input(votes.shape[1:]),
        keras.Input(activations.shape[1:]),
    ]
    model = keras.Model(inputs, _RoutingProbe(conv)(inputs))
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss=["mse", "mse"])
    outputs = model.predict([votes, activations], verbose=0)
    test.assertAllFinite(outputs)
    history = model.fit(
        [votes, activations],
        [np.zeros_like(o) for o in outputs],
        epochs=1,
        verbose=0,
    )
    test.assertTrue(np.isfinite(history.history["loss"][-1]))
    test.assertAllFinite(model.weights)


class ConvRoutingLayoutTest(TestCase):
    """The children-first layout (EMConvCaps on TensorFlow) routes exactly
    as the positions-first one, on every backend."""

    @parameterized.named_parameters(
        ("k3_s2_valid", 7, 3, 2, "valid", "official"),
        ("k3_s1_same", 5, 3, 1, "same", "paper"),
    )
    @backend_marks.COMPILED
    def test_layouts_agree(self, size, kernel, stride, padding, mode):
        rng = np.random.default_rng(2)
        num_in, num_out, batch = 3, 4, 2
        (out_h, out_w), _ = tiling_sizes(
            (size, size), (kernel, kernel), (stride, stride), padding
        )
        children = kernel * kernel * num_in
        votes = rng.normal(size=(batch, out_h, out_w, children, num_out, 16))
        votes = votes.astype("float32")
        activations = rng.uniform(size=(batch, size, size, num_in))
        activations = activations.astype("float32")
        beta_v = rng.normal(size=num_out).astype("float32")
        beta_a = rng.normal(size=num_out).astype("float32")
        options = _core.check_options(3, 0.01, 5e-4, None, mode)
        geometry = tiling(
            (size, size), (kernel, kernel), (stride, stride), padding
        )
        routing = {
            "routing_normalization": "official",
            "options": options,
            "return_assignments": True,
        }
        expected = compiled(
            _core.route_conv,
            layout=_vote_layouts.PositionsFirst(geometry, num_in),
            **routing,
        )(votes, activations, beta_v, beta_a)
        # (batch, h, w, children, out, 4 * 4) -> (children, batch, h, w,
        # 4, out, 4).
        children_first = np.reshape(
            votes, (batch, out_h, out_w, children, num_out, 4, 4)
        ).transpose(3, 0, 1, 2, 5, 4, 6)
        actual = compiled(
            _core.route_conv,
            layout=_vote_layouts.ChildrenFirst(geometry, num_in),
            **routing,
        )(children_first, activations, beta_v, beta_a)
        for a, e in zip(actual, expected):
            self.assertEqual(tuple(a.shape), tuple(e.shape))
            # Three iterations of float32 arithmetic in another order.
            self.assertAllClose(a, e, atol=1e-4, rtol=1e-4)


class DefaultsTest(TestCase):
    def test_ops_layers_and_model_share_the_defaults(self):
        def defaults(fn, names):
            parameters = inspect.signature(fn).parameters
            return [parameters[name].default for name in names]

        # One vocabulary: the ops and the layers name the options alike.
        names = [
            "routing_iterations",
            "final_lambda",
            "min_variance",
            "routing_mode",
            "epsilon",
        ]
        expected = [2, 1e-3, 5e-4, "paper", None]
        for fn in (
            capsule_ops.em_routing,
            capsule_ops.em_conv_routing,
            layers.EMConvCaps,
            layers.EMClassCaps,
        ):
            self.assertEqual(defaults(fn, names), expected, msg=fn.__name__)
        self.assertEqual(
            defaults(capsule_ops.em_conv_routing, ["routing_normalization"]),
            defaults(layers.EMConvCaps, ["routing_normalization"]),
        )
        # The internal options carry the same names.
        self.assertEqual(
            dict(_core.DEFAULTS._asdict()), dict(zip(names, expected))
        )
        # The model's `None` is its routing setting's, the layers' 2 by
        # default (tests/models/matrix_capsnet_test.py builds it).
        self.assertEqual(
            defaults(models.MatrixCapsNet, ["routing_iterations", "routing"]),
            [None, "default"],
        )
