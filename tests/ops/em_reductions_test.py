import keras
import numpy as np
from absl.testing import parameterized

from keras_capsules.ops.em import _reductions
from keras_capsules.testing import TestCase
from tests import backend_marks

pytestmark = backend_marks.EAGER


class _Probe(keras.layers.Layer):
    """`sum(sum_children(w * x) * u) + sum(spread_children(s) * x * u2)`,
    written with the helpers or with plain sums and broadcasting."""

    def __init__(self, x, u, u2, plain, **kwargs):
        super().__init__(**kwargs)
        self.x, self.u, self.u2, self.plain = x, u, u2, plain

    def build(self, input_shape):
        rng = np.random.default_rng(0)
        self.w = self.add_weight(
            shape=self.x.shape,
            initializer=keras.initializers.Constant(
                rng.normal(size=self.x.shape)
            ),
        )
        self.s = self.add_weight(
            shape=(1,) + self.x.shape[1:],
            initializer=keras.initializers.Constant(
                rng.normal(size=(1,) + self.x.shape[1:])
            ),
        )

    def call(self, inputs):
        x, u, u2 = (
            keras.ops.convert_to_tensor(a) for a in (self.x, self.u, self.u2)
        )
        size = self.x.shape[0]
        if self.plain:
            total = keras.ops.sum(self.w * x, axis=0, keepdims=True)
            spread = self.s
        else:
            total = _reductions.sum_children(self.w * x, 0)
            spread = _reductions.spread_children(self.s, 0, size)
        value = keras.ops.sum(total * u) + keras.ops.sum(spread * x * u2)
        return keras.ops.zeros_like(inputs) + value


def _one_sgd_step(plain, x, u, u2):
    probe = _Probe(x, u, u2, plain)
    inputs = keras.Input((1,))
    model = keras.Model(inputs, probe(inputs))
    model.compile(
        optimizer=keras.optimizers.SGD(1.0), loss=lambda y, p: p[:, 0]
    )
    before = [np.array(v) for v in probe.get_weights()]
    model.fit(np.ones((1, 1), "float32"), np.zeros((1, 1)), verbose=0)
    after = probe.get_weights()
    return [b - a for b, a in zip(before, after)]


class ChildrenSumTest(TestCase):
    @parameterized.parameters(1, 2, 7, 12, 288, 31, 33, 72, 144, 256, 67)
    def test_chunked_sum_matches_numpy(self, size):
        x = np.random.default_rng(size).normal(size=(3, size, 5))
        x = x.astype("float32")
        actual = _reductions.chunked_sum(keras.ops.convert_to_tensor(x), 1)
        self.assertAllClose(actual, x.sum(axis=1, keepdims=True), atol=1e-5)

    @parameterized.parameters(
        (32, 1),
        (33, 1),
        (66, 2),
        (67, 1),
        (72, 2),
        (144, 4),
        (256, 4),
        (288, 8),
        (512, 8),
        (576, 16),
    )
    def test_chunk_count_leaves_more_than_32_per_slice(self, size, expected):
        # XLA's CPU tree-reduction rewrite, which keeps the slice additions
        # vectorised, splits only reduced axes longer than 32.
        self.assertEqual(_reductions.chunk_count(size), expected)

    @backend_marks.COMPILED
    def test_values_and_gradients_match_plain_sums(self):
        rng = np.random.default_rng(1)
        x = rng.normal(size=(18, 2, 3)).astype("float32")
        u = rng.normal(size=(1, 2, 3)).astype("float32")
        u2 = rng.normal(size=(18, 2, 3)).astype("float32")
        expected = _one_sgd_step(True, x, u, u2)
        actual = _one_sgd_step(False, x, u, u2)
        # d/dw = x * u broadcast; d/ds = sum over children of x * u2.
        self.assertAllClose(expected[0], x * u, atol=1e-5)
        self.assertAllClose(
            expected[1], (x * u2).sum(axis=0, keepdims=True), atol=1e-5
        )
        for a, e in zip(actual, expected):
            self.assertAllClose(a, e, atol=1e-5)


class _FunctionProbe(keras.layers.Layer):
    """`sum(function(*weights) * upstream)`, every argument a weight."""

    def __init__(self, function, arrays, upstream, **kwargs):
        super().__init__(**kwargs)
        self.function, self.arrays, self.upstream = function, arrays, upstream

    def build(self, input_shape):
        self.arguments = [
            self.add_weight(
                shape=a.shape, initializer=keras.initializers.Constant(a)
            )
            for a in self.arrays
        ]

    def call(self, inputs):
        value = self.function(*self.arguments)
        upstream = keras.ops.convert_to_tensor(self.upstream)
        value = keras.ops.sum(value * upstream)
        return keras.ops.zeros_like(inputs) + value


def _value_and_gradients(function, arrays, upstream):
    probe = _FunctionProbe(function, arrays, upstream)
    inputs = keras.Input((1,))
    model = keras.Model(inputs, probe(inputs))
    model.compile(
        optimizer=keras.optimizers.SGD(1.0), loss=lambda y, p: p[:, 0]
    )
    value = model.predict(np.ones((1, 1), "float32"), verbose=0)[0, 0]
    model.fit(np.ones((1, 1), "float32"), np.zeros((1, 1)), verbose=0)
    after = probe.get_weights()
    return value, [b - a for b, a in zip(arrays, after)]


class FusedStepsTest(TestCase):
    """The M- and E-step sums against NumPy: values and the hand-written
    gradients."""

    # Children-first layout: (children, batch, pose rows, parents, pose
    # columns); the children axis is 0, the pose axes are 2 and 4.
    shape = (6, 2, 2, 3, 2)
    pose_axes = (2, 4)

    def arrays(self, weights_shape):
        rng = np.random.default_rng(3)
        votes = rng.normal(size=self.shape).astype("float32")
        weights = rng.uniform(0.1, 1.0, size=weights_shape)
        mean = rng.normal(size=(1,) + self.shape[1:])
        variance = rng.uniform(0.5, 2.0, size=(1,) + self.shape[1:])
        return [a.astype("float32") for a in (votes, weights, mean, variance)]

    @parameterized.named_parameters(
        ("per_parent", (6, 2, 1, 3, 1)),
        ("shared_by_parents", (6, 2, 1, 1, 1)),
    )
    @backend_marks.COMPILED
    def test_weighted_mean(self, weights_shape):
        votes, weights, _, _ = self.arrays(weights_shape)
        upstream = np.random.default_rng(4).normal(size=(1,) + self.shape[1:])
        upstream = upstream.astype("float32")
        value, (d_weights, d_votes) = _value_and_gradients(
            lambda w, v: _reductions.weighted_mean(w, v, 0),
            [weights, votes],
            upstream,
        )
        mean = (weights * votes).sum(axis=0, keepdims=True)
        axes = tuple(
            i for i, n in enumerate(weights_shape) if n == 1 and i != 0
        )
        self.assertAllClose(value, (mean * upstream).sum(), atol=1e-4)
        self.assertAllClose(
            d_weights,
            (votes * upstream).sum(axis=axes, keepdims=True),
            atol=1e-4,
        )
        self.assertAllClose(
            d_votes, np.broadcast_to(weights * upstream, votes.shape), atol=1e-5
        )

    @parameterized.named_parameters(
        ("per_parent", (6, 2, 1, 3, 1)),
        ("shared_by_parents", (6, 2, 1, 1, 1)),
    )
    @backend_marks.COMPILED
    def test_weighted_variance(self, weights_shape):
        votes, weights, mean, _ = self.arrays(weights_shape)
        upstream = np.random.default_rng(5).normal(size=(1,) + self.shape[1:])
        upstream = upstream.astype("float32")
        value, (d_weights, d_votes, d_mean) = _value_and_gradients(
            lambda w, v, m: _reductions.weighted_variance(w, v, m, 0),
            [weights, votes, mean],
            upstream,
        )
        deviation = votes - mean
        variance = (weights * deviation**2).sum(axis=0, keepdims=True)
        axes = tuple(
            i for i, n in enumerate(weights_shape) if n == 1 and i != 0
        )
        self.assertAllClose(value, (variance * upstream).sum(), atol=1e-4)
        self.assertAllClose(
            d_weights,
            (deviation**2 * upstream).sum(axis=axes, keepdims=True),
            atol=1e-4,
        )
        d_deviation = 2.0 * weights * upstream * deviation
        self.assertAllClose(d_votes, d_deviation, atol=1e-4)
        self.assertAllClose(
            d_mean, -d_deviation.sum(axis=0, keepdims=True), atol=1e-4
        )

    @backend_marks.COMPILED
    def test_deviation_energy(self):
        votes, _, mean, variance = self.arrays((6, 2, 1, 3, 1))
        upstream = np.random.default_rng(6).normal(size=(6, 2, 1, 3, 1))
        upstream = upstream.astype("float32")
        value, (d_votes, d_mean, d_variance) = _value_and_gradients(
            lambda v, m, s: _reductions.deviation_energy(
                v, m, s, 0, self.pose_axes
            ),
            [votes, mean, variance],
            upstream,
        )
        deviation = votes - mean
        energy = (deviation**2 / (2.0 * variance)).sum(
            axis=self.pose_axes, keepdims=True
        )
        self.assertAllClose(value, (energy * upstream).sum(), atol=1e-4)
        d_deviation = upstream * deviation / variance
        self.assertAllClose(d_votes, d_deviation, atol=1e-4)
        self.assertAllClose(
            d_mean, -d_deviation.sum(axis=0, keepdims=True), atol=1e-4
        )
        self.assertAllClose(
            d_variance,
            -(upstream * deviation**2).sum(axis=0, keepdims=True)
            / (2.0 * variance**2),
            atol=1e-4,
        )
