import keras
import numpy as np

from keras_capsules.metrics import TopKExactMatch
from keras_capsules.metrics import top_k_exact_match
from keras_capsules.testing import TestCase


def _reference(y_true, y_pred, k):
    """Whether the set of the k highest scores equals the labelled set."""
    top = np.argsort(-y_pred, axis=-1, kind="stable")[:, :k]
    return np.array(
        [
            set(row) == set(np.flatnonzero(labels > 0.5))
            for row, labels in zip(top, y_true)
        ],
        "float32",
    )


class TopKExactMatchTest(TestCase):
    def test_matches_the_reference(self):
        rng = np.random.default_rng(0)
        for k in (1, 2, 3):
            y_pred = rng.uniform(size=(64, 10)).astype("float32")
            y_true = np.zeros((64, 10), "float32")
            for row in range(64):
                # Half the rows take their labels from the top scores.
                ranked = np.argsort(-y_pred[row])
                chosen = ranked[:k] if row % 2 else rng.permutation(10)[:k]
                y_true[row, chosen] = 1.0
            self.assertAllClose(
                top_k_exact_match(y_true, y_pred, k=k),
                _reference(y_true, y_pred, k),
            )

    def test_one_right_label_of_two_is_wrong(self):
        y_true = np.array([[1, 1, 0, 0]], "float32")
        y_pred = np.array([[0.9, 0.1, 0.8, 0.0]], "float32")
        self.assertAllClose(top_k_exact_match(y_true, y_pred), [0.0])

    def test_metric_averages_with_sample_weight(self):
        metric = TopKExactMatch(k=2)
        y_true = np.array([[1, 1, 0], [1, 0, 1], [0, 1, 1]], "float32")
        y_pred = np.array(
            [[0.9, 0.8, 0.1], [0.9, 0.8, 0.1], [0.1, 0.8, 0.9]], "float32"
        )
        metric.update_state(y_true, y_pred, sample_weight=[1.0, 3.0, 0.0])
        self.assertAllClose(metric.result(), 0.25)

    def test_config_round_trip_and_saving(self):
        metric = TopKExactMatch(k=3, name="all_three")
        restored = TopKExactMatch.from_config(metric.get_config())
        self.assertEqual((restored.k, restored.name), (3, "all_three"))
        restored = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(metric)
        )
        self.assertIsInstance(restored, TopKExactMatch)
        self.assertEqual(restored.k, 3)

    def test_invalid_k(self):
        with self.assertRaisesRegex(ValueError, r"Received: k=0"):
            TopKExactMatch(k=0)
