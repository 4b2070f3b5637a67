import io
import math
import os
from contextlib import redirect_stdout

import keras
import numpy as np
from absl.testing import parameterized

from keras_capsules.callbacks import SpreadMarginScheduler
from keras_capsules.losses import SpreadLoss
from keras_capsules.testing import TestCase

_BATCH_SIZE = 2
_STEPS_PER_EPOCH = 4


def _official_margin(step):
    """google-research capsule_em/layers.py, `optimizer`."""
    argument = min(10.0, step / 50000.0 - 4)
    return 0.2 + 0.79 / (1.0 + math.exp(-argument))


def _numpy_linear(position, initial, final, ramp):
    return initial + (final - initial) * np.clip(position / ramp, 0.0, 1.0)


def _constant_data():
    # Two classes; the model below always outputs (0.5, 0.5), so every
    # sample costs max(0, m - 0)^2 = m^2: the loss reveals the margin.
    x = np.ones((_BATCH_SIZE * _STEPS_PER_EPOCH, 1), "float32")
    y = np.tile(np.array([[1.0, 0.0]], "float32"), (len(x), 1))
    return x, y


def _constant_layer():
    return keras.layers.Dense(
        2,
        kernel_initializer="zeros",
        bias_initializer=keras.initializers.Constant(0.5),
        name="dense",
    )


def _compile(model, loss):
    # A zero learning rate keeps the outputs constant while the compiled
    # train step still runs (XLA on TensorFlow and JAX).
    model.compile(
        optimizer=keras.optimizers.SGD(0.0),
        loss=loss,
        jit_compile=keras.backend.backend() != "torch",
    )
    return model


def _functional_model():
    inputs = keras.Input((1,))
    model = keras.Model(inputs, _constant_layer()(inputs))
    return _compile(model, SpreadLoss())


class MarginOwnerModel(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = _constant_layer()
        self.spread_margin = keras.Variable(
            0.2, trainable=False, name="spread_margin"
        )

    def call(self, inputs):
        return self.dense(inputs)


class _BatchLossRecorder(keras.callbacks.Callback):
    """Recovers each step's loss from the running mean that fit logs."""

    def __init__(self):
        super().__init__()
        self.losses = []
        self._previous = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._previous = 0.0

    def on_train_batch_end(self, batch, logs=None):
        mean = float(logs["loss"])
        self.losses.append((batch + 1) * mean - batch * self._previous)
        self._previous = mean


class _InterruptAt(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            raise RuntimeError("Interrupted on purpose.")


@keras.saving.register_keras_serializable(package="keras_capsules_tests")
def _halving_schedule(epoch):
    return 0.8 * 0.5**epoch


class ScheduleTest(TestCase):
    @parameterized.named_parameters(
        ("start", 0),
        ("rising", 100_000),
        ("midpoint", 200_000),
        ("late", 500_000),
        ("capped", 700_000),
        ("beyond", 1_000_000),
    )
    def test_sigmoid_reproduces_the_official_schedule(self, step):
        scheduler = SpreadMarginScheduler(
            "sigmoid",
            initial_margin=0.2,
            final_margin=0.99,
            ramp_steps=400_000,
        )
        self.assertAlmostEqual(
            scheduler.margin_at(step), _official_margin(step), places=12
        )

    def test_default_ramp_is_the_official_horizon(self):
        default = SpreadMarginScheduler("sigmoid", final_margin=0.99)
        self.assertAlmostEqual(
            default.margin_at(123_456), _official_margin(123_456), places=12
        )
        linear = SpreadMarginScheduler()
        self.assertAlmostEqual(linear.margin_at(200_000), 0.55)

    @parameterized.named_parameters(
        ("steps", {"ramp_steps": 10}, [0, 3, 10, 25]),
        ("epochs", {"ramp_epochs": 4}, [0, 1.5, 4, 9]),
    )
    def test_linear(self, kwargs, positions):
        scheduler = SpreadMarginScheduler(
            initial_margin=0.1, final_margin=0.7, **kwargs
        )
        ramp = next(iter(kwargs.values()))
        for position in positions:
            self.assertAlmostEqual(
                scheduler.margin_at(position),
                _numpy_linear(position, 0.1, 0.7, ramp),
            )

    def test_callable(self):
        scheduler = SpreadMarginScheduler(
            _halving_schedule, update_freq="epoch"
        )
        self.assertAlmostEqual(scheduler.margin_at(2), 0.2)

    def test_callable_must_return_a_valid_margin(self):
        scheduler = SpreadMarginScheduler(lambda step: -1.0)
        with self.assertRaisesRegex(
            ValueError, "finite non-negative margin. Received: margin=-1.0"
        ):
            scheduler.margin_at(0)

    def test_config_round_trip(self):
        for scheduler in (
            SpreadMarginScheduler(
                "sigmoid",
                0.1,
                0.95,
                ramp_epochs=3,
                update_freq="epoch",
                verbose=1,
            ),
            SpreadMarginScheduler(_halving_schedule, update_freq="epoch"),
        ):
            config = scheduler.get_config()
            revived = SpreadMarginScheduler.from_config(config)
            self.assertEqual(revived.get_config(), config)
            deserialized = keras.saving.deserialize_keras_object(
                keras.saving.serialize_keras_object(scheduler)
            )
            self.assertIsInstance(deserialized, SpreadMarginScheduler)
            self.assertEqual(deserialized.get_config(), config)
            self.assertAlmostEqual(
                deserialized.margin_at(2), scheduler.margin_at(2)
            )

    @parameterized.named_parameters(
        (
            "schedule",
            {"schedule": "cosine"},
            ValueError,
            "Received: schedule=cosine",
        ),
        ("schedule_type", {"schedule": 3}, TypeError, "Received: schedule=3"),
        (
            "initial",
            {"initial_margin": -0.2},
            ValueError,
            "Received: initial_margin=-0.2",
        ),
        (
            "final_type",
            {"final_margin": "0.9"},
            TypeError,
            "Received: final_margin='0.9'",
        ),
        ("ramp_steps", {"ramp_steps": 0}, ValueError, "Received: ramp_steps=0"),
        (
            "ramp_epochs",
            {"ramp_epochs": -2},
            ValueError,
            "Received: ramp_epochs=-2",
        ),
        (
            "both_ramps",
            {"ramp_steps": 10, "ramp_epochs": 2},
            ValueError,
            "at most one.*Received: ramp_steps=10, ramp_epochs=2",
        ),
        (
            "callable_ramp",
            {"schedule": _halving_schedule, "ramp_epochs": 2},
            ValueError,
            "built-in schedules.*Received: ramp_steps=None",
        ),
        (
            "update_freq",
            {"update_freq": "step"},
            ValueError,
            "Received: update_freq=step",
        ),
    )
    def test_rejects_bad_arguments(self, kwargs, error, pattern):
        with self.assertRaisesRegex(error, pattern):
            SpreadMarginScheduler(**kwargs)


class SchedulerFitTest(TestCase):
    def test_epoch_updates_reach_the_compiled_loss(self):
        x, y = _constant_data()
        model = _functional_model()
        scheduler = SpreadMarginScheduler(ramp_epochs=4, update_freq="epoch")
        history = model.fit(
            x,
            y,
            batch_size=_BATCH_SIZE,
            epochs=6,
            callbacks=[scheduler],
            verbose=0,
        )
        expected = _numpy_linear(np.arange(6), 0.2, 0.9, 4)
        # The loss is margin^2 for every sample: its square root is the
        # margin the compiled step actually used.
        self.assertAllClose(
            np.sqrt(history.history["loss"]), expected, atol=1e-6
        )
        self.assertAllClose(
            np.array(history.history["spread_margin"]), expected, atol=1e-6
        )
        self.assertAllClose(model.loss.margin, 0.9)

    @parameterized.named_parameters(
        # The functional model does not track the loss's variable: the
        # scheduler has its steps traced again.
        ("linear_functional", "linear", False),
        ("sigmoid_owned", "sigmoid", True),
    )
    def test_batch_updates_reach_the_compiled_loss(self, schedule, owned):
        x, y = _constant_data()
        if owned:
            model = MarginOwnerModel()
            _compile(model, SpreadLoss(margin=model.spread_margin))
        else:
            model = _functional_model()
        scheduler = SpreadMarginScheduler(
            schedule, ramp_steps=9, update_freq="batch"
        )
        recorder = _BatchLossRecorder()
        model.fit(
            x,
            y,
            batch_size=_BATCH_SIZE,
            epochs=3,
            callbacks=[scheduler, recorder],
            verbose=0,
        )
        steps = np.arange(3 * _STEPS_PER_EPOCH)
        expected = [scheduler.margin_at(int(step)) for step in steps]
        self.assertAllClose(
            np.sqrt(np.maximum(recorder.losses, 0.0)),
            np.array(expected),
            atol=1e-5,
        )
        self.assertNotAlmostEqual(expected[0], expected[5])

    def test_fractional_epochs_with_batch_updates(self):
        x, y = _constant_data()
        model = _functional_model()
        scheduler = SpreadMarginScheduler(ramp_epochs=2)
        recorder = _BatchLossRecorder()
        model.fit(
            x,
            y,
            batch_size=_BATCH_SIZE,
            epochs=2,
            callbacks=[scheduler, recorder],
            verbose=0,
        )
        positions = np.arange(2 * _STEPS_PER_EPOCH) / _STEPS_PER_EPOCH
        self.assertAllClose(
            np.sqrt(np.maximum(recorder.losses, 0.0)),
            _numpy_linear(positions, 0.2, 0.9, 2),
            atol=1e-5,
        )

    def test_model_owned_variable(self):
        x, y = _constant_data()
        model = MarginOwnerModel()
        _compile(model, SpreadLoss(margin=model.spread_margin))
        scheduler = SpreadMarginScheduler(ramp_epochs=2, update_freq="epoch")
        history = model.fit(
            x,
            y,
            batch_size=_BATCH_SIZE,
            epochs=3,
            callbacks=[scheduler],
            verbose=0,
        )
        self.assertAllClose(
            np.sqrt(history.history["loss"]),
            np.array([0.2, 0.55, 0.9]),
            atol=1e-6,
        )
        self.assertAllClose(model.spread_margin, 0.9)

    def test_assigns_the_loss_variable_without_adding_state(self):
        x, y = _constant_data()
        model = _functional_model()
        layers = [layer.name for layer in model.layers]
        num_variables = len(model.variables)
        model.fit(
            x,
            y,
            epochs=1,
            verbose=0,
            callbacks=[SpreadMarginScheduler(initial_margin=0.4)],
        )
        self.assertAllClose(model.loss.margin, 0.4)
        self.assertEqual([layer.name for layer in model.layers], layers)
        self.assertLen(model.variables, num_variables)
        self.assertFalse(
            any(v is model.loss.margin for v in model.non_trainable_variables)
        )

    def test_verbose_prints_the_margin(self):
        x, y = _constant_data()
        model = _functional_model()
        scheduler = SpreadMarginScheduler(
            ramp_epochs=1, update_freq="epoch", verbose=1
        )
        output = io.StringIO()
        with redirect_stdout(output):
            model.fit(
                x, y, batch_size=8, epochs=2, callbacks=[scheduler], verbose=0
            )
        self.assertIn("setting the spread margin to 0.9000", output.getvalue())

    def test_requires_a_spread_loss(self):
        x, y = _constant_data()
        inputs = keras.Input((1,))
        model = keras.Model(inputs, _constant_layer()(inputs))
        model.compile(optimizer="sgd", loss="mse")
        with self.assertRaisesRegex(
            ValueError, "found no margin to schedule.*Received: loss='mse'"
        ):
            model.fit(
                x, y, epochs=1, verbose=0, callbacks=[SpreadMarginScheduler()]
            )

    def test_sequential_model(self):
        x, y = _constant_data()
        model = keras.Sequential([keras.Input((1,)), _constant_layer()])
        _compile(model, SpreadLoss())
        scheduler = SpreadMarginScheduler(ramp_epochs=1, update_freq="epoch")
        history = model.fit(
            x, y, batch_size=8, epochs=2, callbacks=[scheduler], verbose=0
        )
        self.assertAllClose(
            np.sqrt(history.history["loss"]), np.array([0.2, 0.9]), atol=1e-6
        )

    def test_owned_margin_must_be_the_loss_margin(self):
        x, y = _constant_data()
        model = _compile(MarginOwnerModel(), SpreadLoss())
        with self.assertRaisesRegex(
            ValueError,
            r"SpreadLoss\(margin=model.spread_margin\)\. Received: loss=",
        ):
            model.fit(
                x, y, epochs=1, verbose=0, callbacks=[SpreadMarginScheduler()]
            )


class SchedulerStateTest(TestCase):
    def test_saved_model_keeps_the_margin_and_resumes_the_schedule(self):
        x, y = _constant_data()
        model = _functional_model()
        model.fit(
            x,
            y,
            batch_size=_BATCH_SIZE,
            epochs=2,
            verbose=0,
            callbacks=[SpreadMarginScheduler(ramp_steps=16)],
        )
        path = os.path.join(self.get_temp_dir(), "model.keras")
        model.save(path)
        # The loss's margin comes back through its config.
        loaded = keras.models.load_model(path)
        self.assertIsInstance(loaded.loss, SpreadLoss)
        self.assertAllClose(loaded.loss.margin, 0.2 + 0.7 * 7 / 16)
        self.assertAllClose(
            loaded.predict(x, verbose=0), model.predict(x, verbose=0)
        )
        recorder = _BatchLossRecorder()
        loaded.fit(
            x,
            y,
            batch_size=_BATCH_SIZE,
            epochs=1,
            verbose=0,
            callbacks=[SpreadMarginScheduler(ramp_steps=16), recorder],
        )
        # The optimizer's step counter was saved: the ramp goes on from
        # step 8.
        self.assertAllClose(
            np.sqrt(np.maximum(recorder.losses, 0.0)),
            _numpy_linear(np.arange(8, 12), 0.2, 0.9, 16),
            atol=1e-5,
        )

    @parameterized.named_parameters(
        ("epoch", {"ramp_epochs": 5, "update_freq": "epoch"}),
        ("batch", {"ramp_steps": 20, "update_freq": "batch"}),
    )
    def test_backup_and_restore_resumes_the_schedule(self, kwargs):
        x, y = _constant_data()
        backup_dir = os.path.join(self.get_temp_dir(), "backup")
        model = _functional_model()
        with self.assertRaisesRegex(RuntimeError, "on purpose"):
            model.fit(
                x,
                y,
                batch_size=_BATCH_SIZE,
                epochs=6,
                verbose=0,
                callbacks=[
                    keras.callbacks.BackupAndRestore(backup_dir),
                    SpreadMarginScheduler(**kwargs),
                    _InterruptAt(3),
                ],
            )
        keras.utils.clear_session()
        resumed = _functional_model()
        scheduler = SpreadMarginScheduler(**kwargs)
        # The scheduler first: tracking must not depend on the order.
        history = resumed.fit(
            x,
            y,
            batch_size=_BATCH_SIZE,
            epochs=6,
            verbose=0,
            callbacks=[scheduler, keras.callbacks.BackupAndRestore(backup_dir)],
        )
        self.assertLen(history.history["loss"], 3)
        if kwargs["update_freq"] == "epoch":
            margins = _numpy_linear(np.arange(3, 6), 0.2, 0.9, 5)
            expected_losses = margins**2
        else:
            steps = np.arange(3 * _STEPS_PER_EPOCH, 6 * _STEPS_PER_EPOCH)
            per_step = _numpy_linear(steps, 0.2, 0.9, 20) ** 2
            expected_losses = per_step.reshape(3, _STEPS_PER_EPOCH).mean(-1)
        self.assertAllClose(
            np.array(history.history["loss"]), expected_losses, atol=1e-5
        )
