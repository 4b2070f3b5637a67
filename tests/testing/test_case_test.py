import keras
import numpy as np

from keras_capsules.testing import TestCase


class _RenamingDense(keras.layers.Dense):
    """Stores one more unit than asked: its config does not round-trip."""

    def get_config(self):
        config = super().get_config()
        config["units"] += 1
        return config


class TestCaseTest(TestCase):
    def test_run_layer_test_on_a_keras_layer(self):
        self.run_layer_test(
            keras.layers.Dense,
            {"units": 3, "use_bias": False},
            input_shape=(2, 4),
            expected_output_shape=(2, 3),
            expected_num_trainable_weights=1,
        )

    def test_int_argument_matches_a_tuple_stored_config(self):
        self.run_layer_test(
            keras.layers.Conv2D,
            {"filters": 2, "kernel_size": 3},
            input_shape=(1, 5, 5, 1),
            expected_output_shape=(1, 3, 3, 2),
            run_training_check=False,
            run_saving_check=False,
        )

    def test_config_check_rejects_a_different_value(self):
        with self.assertRaises(AssertionError):
            self._check_config(_RenamingDense, {"units": 3})

    def test_assert_all_close_detects_a_difference(self):
        with self.assertRaises(AssertionError):
            self.assertAllClose(np.zeros(3), np.ones(3))

    def test_assert_all_finite_detects_nan(self):
        with self.assertRaises(AssertionError):
            self.assertAllFinite(np.array([0.0, np.nan]))

    def test_run_loss_test_on_a_keras_loss(self):
        y_true = np.eye(3, dtype="float32")
        y_pred = np.full((3, 3), 0.5, dtype="float32")
        self.run_loss_test(
            keras.losses.MeanSquaredError(), y_true, y_pred, expected=0.25
        )
