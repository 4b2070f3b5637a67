import keras
import numpy as np
from absl.testing import parameterized

from keras_capsules.losses import MarginLoss
from keras_capsules.losses import margin_loss
from keras_capsules.testing import TestCase
from tests import references


def _numpy_official_margin_loss(labels, raw_logits):
    """The Sarasra/models formulation: shifted logits, margin 0.4."""
    logits = np.asarray(raw_logits, "float64") - 0.5
    labels = np.asarray(labels, "float64")
    positive = labels * (logits < 0.4) * (logits - 0.4) ** 2
    negative = (1 - labels) * (logits > -0.4) * (logits + 0.4) ** 2
    return 0.5 * positive + 0.5 * 0.5 * negative


def _data(batch=4, num_classes=10, multi_hot=False, seed=0):
    rng = np.random.default_rng(seed)
    y_true = np.eye(num_classes, dtype="float32")[
        rng.integers(0, num_classes, size=batch)
    ]
    if multi_hot:
        y_true = np.maximum(
            y_true,
            np.eye(num_classes, dtype="float32")[
                rng.integers(0, num_classes, size=batch)
            ],
        )
    y_pred = rng.uniform(0.0, 1.0, size=(batch, num_classes))
    return y_true, y_pred.astype("float32")


class MarginLossFunctionTest(TestCase):
    @parameterized.named_parameters(
        ("paper", {}, False),
        ("mean", {"reduction_over_classes": "mean"}, False),
        ("multi_hot", {}, True),
        (
            "custom_margins",
            {"m_plus": 0.95, "m_minus": 0.05, "down_weight": 0.25},
            False,
        ),
    )
    def test_matches_numpy(self, kwargs, multi_hot):
        y_true, y_pred = _data(multi_hot=multi_hot)
        self.assertAllClose(
            margin_loss(y_true, y_pred, **kwargs),
            references.margin_loss(y_true, y_pred, **kwargs),
            atol=1e-6,
        )

    def test_hand_computed_value(self):
        y_true = np.array([[0.0, 1.0, 0.0]], dtype="float32")
        y_pred = np.array([[0.2, 0.8, 0.05]], dtype="float32")
        # Present: (0.9 - 0.8)^2 = 0.01; absent: 0.5 * (0.2 - 0.1)^2.
        self.assertAllClose(
            margin_loss(y_true, y_pred), np.array([0.015]), atol=1e-7
        )

    def test_zero_inside_margins(self):
        y_true = np.eye(3, dtype="float32")
        y_pred = 0.95 * y_true + 0.05 * (1 - y_true)
        self.assertAllClose(margin_loss(y_true, y_pred), np.zeros(3))

    def test_official_code_relation(self):
        # The official code averages over batch and classes and halves
        # both terms: 0.5 * the "mean" reduction.
        y_true, y_pred = _data(batch=8)
        official = np.mean(_numpy_official_margin_loss(y_true, y_pred))
        ours = keras.ops.convert_to_numpy(
            margin_loss(y_true, y_pred, reduction_over_classes="mean")
        )
        self.assertAllClose(0.5 * np.mean(ours), official, atol=1e-7)
        paper = keras.ops.convert_to_numpy(margin_loss(y_true, y_pred))
        self.assertAllClose(np.mean(paper) / 20.0, official, atol=1e-7)

    def test_float16_inputs_give_float32(self):
        y_true, y_pred = _data()
        value = margin_loss(y_true.astype("float16"), y_pred.astype("float16"))
        self.assertEqual(
            keras.backend.standardize_dtype(value.dtype), "float32"
        )
        self.assertAllFinite(value)

    @parameterized.named_parameters(
        ("sparse_labels", (4,), (4, 10)),
        ("wrong_num_classes", (4, 5), (4, 10)),
    )
    def test_shape_mismatch(self, true_shape, pred_shape):
        with self.assertRaisesRegex(
            ValueError,
            r"same shape as y_pred.*Received: "
            r"y_true\.shape=\(.*\), y_pred\.shape=\(4, 10\)",
        ):
            margin_loss(np.zeros(true_shape), np.zeros(pred_shape))

    def test_unknown_class_reduction(self):
        with self.assertRaisesRegex(
            ValueError,
            r'reduction_over_classes must be "sum" or "mean"\. '
            r"Received: reduction_over_classes=max",
        ):
            margin_loss(
                np.zeros((1, 2)),
                np.zeros((1, 2)),
                reduction_over_classes="max",
            )


class MarginLossTest(TestCase):
    @parameterized.named_parameters(
        ("sum_over_batch_size", "sum_over_batch_size", "sum"),
        ("batch_sum", "sum", "sum"),
        ("class_mean", "sum_over_batch_size", "mean"),
    )
    def test_loss_basics(self, reduction, reduction_over_classes):
        y_true, y_pred = _data(batch=4, num_classes=5, multi_hot=True)
        per_sample = references.margin_loss(
            y_true, y_pred, reduction_over_classes=reduction_over_classes
        )
        expected = per_sample.sum() if reduction == "sum" else per_sample.mean()
        self.run_loss_test(
            MarginLoss(
                reduction=reduction,
                reduction_over_classes=reduction_over_classes,
            ),
            y_true,
            y_pred,
            expected=expected,
        )

    def test_config_round_trip(self):
        loss = MarginLoss(
            m_plus=0.8,
            m_minus=0.2,
            down_weight=0.25,
            reduction_over_classes="mean",
            reduction="sum",
            name="margin",
            dtype="float64",
        )
        config = loss.get_config()
        self.assertEqual(
            config,
            {
                "m_plus": 0.8,
                "m_minus": 0.2,
                "down_weight": 0.25,
                "reduction_over_classes": "mean",
                "reduction": "sum",
                "name": "margin",
                "dtype": "float64",
            },
        )
        self.assertEqual(MarginLoss.from_config(config).get_config(), config)

    def test_sample_weight(self):
        y_true, y_pred = _data(batch=3)
        weights = np.array([1.0, 0.0, 2.0], dtype="float32")
        expected = (
            np.sum(references.margin_loss(y_true, y_pred) * weights) / 3.0
        )
        self.assertAllClose(
            MarginLoss()(y_true, y_pred, sample_weight=weights),
            expected,
            atol=1e-6,
        )

    def test_string_identifier_is_serializable(self):
        loss = keras.losses.get(
            keras.saving.serialize_keras_object(MarginLoss())
        )
        self.assertIsInstance(loss, MarginLoss)
        fn = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(margin_loss)
        )
        self.assertIs(fn, margin_loss)

    @parameterized.named_parameters(
        (
            "type",
            {"m_plus": "0.9"},
            TypeError,
            r"m_plus must be a Python "
            r"number\. Received: m_plus='0\.9'",
        ),
        (
            "order",
            {"m_plus": 0.1, "m_minus": 0.1},
            ValueError,
            r"m_minus must be smaller than m_plus.*Received: m_minus=0\.1, "
            r"m_plus=0\.1",
        ),
        (
            "down_weight",
            {"down_weight": -1.0},
            ValueError,
            r"non-negative\. Received: down_weight=-1\.0",
        ),
        (
            "class_reduction",
            {"reduction_over_classes": "avg"},
            ValueError,
            r"Received: reduction_over_classes=avg",
        ),
    )
    def test_invalid_arguments(self, kwargs, error, pattern):
        with self.assertRaisesRegex(error, pattern):
            MarginLoss(**kwargs)

    def test_shape_mismatch_in_call(self):
        with self.assertRaisesRegex(ValueError, r"y_pred\.shape=\(2, 3\)"):
            MarginLoss()(np.zeros((2, 4)), np.zeros((2, 3)))
