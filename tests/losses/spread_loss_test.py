import keras
import numpy as np
from absl.testing import parameterized
from keras import ops

from keras_capsules.losses import SpreadLoss
from keras_capsules.losses import spread_loss
from keras_capsules.testing import TestCase
from tests import references


def _numpy_official_order_loss(labels, logits, margin):
    """capsule_em/layers.py: the hinge as an indicator times a square."""
    labels = np.asarray(labels, "float64")
    logits = np.asarray(logits, "float64")
    target = (labels * logits).sum(-1, keepdims=True)
    cost = (
        (1 - labels)
        * (logits > target - margin)
        * (logits + margin - target) ** 2
    )
    return cost.mean(-1)


def _data(batch=6, num_classes=5, seed=0):
    rng = np.random.default_rng(seed)
    y_true = np.eye(num_classes, dtype="float32")[
        rng.integers(0, num_classes, size=batch)
    ]
    y_pred = rng.uniform(0.0, 1.0, size=(batch, num_classes))
    return y_true, y_pred.astype("float32")


class SpreadLossFunctionTest(TestCase):
    @parameterized.named_parameters(
        ("paper_start", {"margin": 0.2}),
        ("paper_end", {"margin": 0.9}),
        ("zero_margin", {"margin": 0.0}),
        ("mean", {"margin": 0.5, "reduction_over_classes": "mean"}),
    )
    def test_matches_numpy(self, kwargs):
        y_true, y_pred = _data()
        self.assertAllClose(
            spread_loss(y_true, y_pred, **kwargs),
            references.spread_loss(y_true, y_pred, **kwargs),
            atol=1e-6,
        )

    @parameterized.named_parameters(("start", 0.2), ("late", 0.79))
    def test_mean_matches_official_order_loss(self, margin):
        y_true, y_pred = _data(batch=8, num_classes=10, seed=3)
        self.assertAllClose(
            spread_loss(
                y_true, y_pred, margin=margin, reduction_over_classes="mean"
            ),
            _numpy_official_order_loss(y_true, y_pred, margin),
            atol=1e-6,
        )

    def test_hand_computed_value(self):
        y_true = np.array([[0.0, 1.0, 0.0]], dtype="float32")
        y_pred = np.array([[0.5, 0.6, 0.1]], dtype="float32")
        # Class 0 is 0.1 behind the target, inside the margin 0.2:
        # (0.2 - 0.1)^2; class 2 is 0.5 behind, outside it.
        self.assertAllClose(
            spread_loss(y_true, y_pred, margin=0.2),
            np.array([0.01]),
            atol=1e-7,
        )

    def test_zero_once_separated_by_the_margin(self):
        y_true = np.array([[1.0, 0.0, 0.0]], dtype="float32")
        y_pred = np.array([[0.95, 0.05, 0.0]], dtype="float32")
        self.assertAllClose(
            spread_loss(y_true, y_pred, margin=0.9),
            np.array([0.0]),
            atol=1e-7,
        )

    def test_identical_activations_cost_the_squared_margin(self):
        y_true = np.eye(4, dtype="float32")[[2, 0]]
        y_pred = np.full((2, 4), 0.5, dtype="float32")
        self.assertAllClose(
            spread_loss(y_true, y_pred, margin=0.3),
            np.array([3 * 0.09, 3 * 0.09]),
            atol=1e-6,
        )

    def test_margin_as_tensor_and_variable(self):
        y_true, y_pred = _data()
        expected = references.spread_loss(y_true, y_pred, margin=0.4)
        self.assertAllClose(
            spread_loss(y_true, y_pred, margin=ops.convert_to_tensor(0.4)),
            expected,
            atol=1e-6,
        )
        variable = keras.Variable(0.4, trainable=False)
        self.assertAllClose(
            spread_loss(y_true, y_pred, margin=variable), expected, atol=1e-6
        )

    @parameterized.named_parameters(
        ("float16", "float16"), ("bfloat16", "bfloat16")
    )
    def test_low_precision_inputs_are_computed_in_float32(self, dtype):
        y_true, y_pred = _data()
        value = spread_loss(
            ops.cast(y_true, dtype), ops.cast(y_pred, dtype), margin=0.9
        )
        self.assertEqual(
            keras.backend.standardize_dtype(value.dtype), "float32"
        )
        self.assertAllFinite(value)
        rounded = ops.convert_to_numpy(
            ops.cast(ops.cast(y_pred, dtype), "float32")
        )
        self.assertAllClose(
            value,
            references.spread_loss(y_true, rounded, margin=0.9),
            atol=1e-5,
        )

    def test_large_and_zero_activations_are_finite(self):
        y_true = np.eye(3, dtype="float32")[[0, 1]]
        y_pred = np.array([[1e4, -1e4, 0.0], [0.0, 0.0, 0.0]], "float32")
        value = spread_loss(y_true, y_pred, margin=0.9)
        self.assertAllFinite(value)
        self.assertAllClose(
            value, references.spread_loss(y_true, y_pred, 0.9), rtol=1e-6
        )

    def test_rejects_non_numeric_margin(self):
        y_true, y_pred = _data()
        with self.assertRaisesRegex(
            TypeError,
            r"Argument margin must be a Python number.*"
            r"Received: margin='big'",
        ):
            spread_loss(y_true, y_pred, margin="big")
        with self.assertRaisesRegex(TypeError, "Received: margin=True"):
            spread_loss(y_true, y_pred, margin=True)

    @parameterized.named_parameters(
        ("negative", -0.1, r"Received: margin=-0.1"),
        ("infinite", float("inf"), r"Received: margin=inf"),
    )
    def test_rejects_bad_margin(self, margin, pattern):
        y_true, y_pred = _data()
        with self.assertRaisesRegex(
            ValueError, "finite non-negative number.*" + pattern
        ):
            spread_loss(y_true, y_pred, margin=margin)

    def test_rejects_unknown_class_reduction(self):
        y_true, y_pred = _data()
        with self.assertRaisesRegex(
            ValueError, "Received: reduction_over_classes=max"
        ):
            spread_loss(y_true, y_pred, reduction_over_classes="max")

    def test_rejects_mismatched_shapes(self):
        y_true, y_pred = _data()
        with self.assertRaisesRegex(
            ValueError, r"one-hot y_true.*Received: y_true.shape=\(6,\)"
        ):
            spread_loss(np.argmax(y_true, -1).astype("float32"), y_pred)


class SpreadLossTest(TestCase):
    def test_run_loss_test(self):
        y_true, y_pred = _data()
        self.run_loss_test(
            SpreadLoss(margin=0.5),
            y_true,
            y_pred,
            expected=references.spread_loss(y_true, y_pred, 0.5).mean(),
        )

    def test_mean_over_classes_config(self):
        y_true, y_pred = _data()
        loss = SpreadLoss(
            margin=0.3,
            reduction_over_classes="mean",
            reduction="sum",
            name="spread",
        )
        config = loss.get_config()
        self.assertEqual(config["reduction_over_classes"], "mean")
        self.assertEqual(config["reduction"], "sum")
        self.assertEqual(config["name"], "spread")
        self.assertAllClose(
            loss(y_true, y_pred),
            references.spread_loss(y_true, y_pred, 0.3, "mean").sum(),
            atol=1e-5,
        )

    def test_margin_is_a_non_trainable_variable(self):
        loss = SpreadLoss()
        self.assertIsInstance(loss.margin, keras.Variable)
        self.assertFalse(loss.margin.trainable)
        self.assertEqual(tuple(loss.margin.shape), ())
        self.assertEqual(loss.get_config()["margin"], 0.2)

    def test_assigned_margin_is_used_and_serialized(self):
        y_true, y_pred = _data()
        loss = SpreadLoss()
        loss.margin.assign(0.9)
        self.assertAllClose(
            loss(y_true, y_pred),
            references.spread_loss(y_true, y_pred, 0.9).mean(),
            atol=1e-6,
        )
        self.assertEqual(loss.get_config()["margin"], 0.9)
        revived = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(loss)
        )
        self.assertIsNot(revived.margin, loss.margin)
        self.assertAllClose(revived.margin, 0.9)

    def test_shares_a_given_variable(self):
        variable = keras.Variable(0.6, trainable=False, name="margin")
        loss = SpreadLoss(margin=variable)
        self.assertIs(loss.margin, variable)
        self.assertEqual(loss.get_config()["margin"], 0.6)

    def test_model_saving_keeps_the_current_margin(self):
        y_true, y_pred = _data()
        inputs = keras.Input((5,))
        model = keras.Model(inputs, keras.layers.Dense(5)(inputs))
        loss = SpreadLoss()
        model.compile(optimizer="sgd", loss=loss)
        loss.margin.assign(0.75)
        model.fit(y_pred, y_true, epochs=1, verbose=0)
        loaded = self.run_model_saving_test(model, y_pred)
        self.assertIsInstance(loaded.loss, SpreadLoss)
        self.assertAllClose(loaded.loss.margin, 0.75)

    def test_rejects_trainable_variable(self):
        with self.assertRaisesRegex(
            ValueError, "must be a non-trainable variable.*Received: margin="
        ):
            SpreadLoss(margin=keras.Variable(0.2))

    def test_rejects_non_scalar_variable(self):
        with self.assertRaisesRegex(
            ValueError, r"scalar variable.*Received: margin.shape=\(2,\)"
        ):
            SpreadLoss(margin=keras.Variable([0.2, 0.3], trainable=False))

    def test_rejects_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "Received: margin=-1"):
            SpreadLoss(margin=-1)
        with self.assertRaisesRegex(TypeError, "Received: margin=None"):
            SpreadLoss(margin=None)
        with self.assertRaisesRegex(
            ValueError, "Received: reduction_over_classes=median"
        ):
            SpreadLoss(reduction_over_classes="median")

    def test_mixed_precision_model(self):
        keras.config.set_dtype_policy("mixed_float16")
        self.addCleanup(keras.config.set_dtype_policy, "float32")
        y_true, y_pred = _data()
        inputs = keras.Input((5,))
        outputs = keras.layers.Dense(5, activation="sigmoid")(inputs)
        model = keras.Model(inputs, outputs)
        model.compile(optimizer="sgd", loss=SpreadLoss(margin=0.9))
        history = model.fit(y_pred * 1e4, y_true, epochs=1, verbose=0)
        self.assertTrue(np.isfinite(history.history["loss"][0]))
