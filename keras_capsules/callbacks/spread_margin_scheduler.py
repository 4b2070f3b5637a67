"""A callback that grows the spread-loss margin during training."""

import math

import keras
from keras import ops

from keras_capsules._validation import check_non_negative_number
from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_number
from keras_capsules.losses.spread_loss import SpreadLoss
from keras_capsules.ops._backend import freezes_untracked_variables

_SCHEDULES = ("linear", "sigmoid")
_UPDATE_FREQS = ("batch", "epoch")
# The official code (google-research, capsule_em/layers.py) sets the margin
# to 0.2 + 0.79 * sigmoid(min(10, step / 50000 - 4)): the sigmoid argument
# runs from -4 to +4 over 400k steps, then is capped at 10.
_DEFAULT_RAMP_STEPS = 400_000
_SIGMOID_CAP = 10.0


def _margin_variables(model):
    """The margin variable the compiled loss of `model` reads.

    The model's own `spread_margin` when it has one, which its
    `SpreadLoss` must then read; otherwise the margin of each `SpreadLoss`
    the model is compiled with.
    """
    compiled_loss = getattr(model, "loss", None)
    losses = [
        loss
        for loss in keras.tree.flatten(compiled_loss or [])
        if isinstance(loss, SpreadLoss)
    ]
    owned = getattr(model, "spread_margin", None)
    if isinstance(owned, keras.Variable):
        if not losses or any(loss.margin is not owned for loss in losses):
            raise ValueError(
                "The model owns a `spread_margin` variable, but no "
                "SpreadLoss it is compiled with reads it, so scheduling it "
                "would change nothing. Compile with "
                "SpreadLoss(margin=model.spread_margin). "
                f"Received: loss={compiled_loss!r}"
            )
        return [owned]
    margins = []
    for loss in losses:
        if not any(loss.margin is margin for margin in margins):
            margins.append(loss.margin)
    return margins


@keras.saving.register_keras_serializable(package="keras_capsules")
class SpreadMarginScheduler(keras.callbacks.Callback):
    """Grows the margin of `SpreadLoss` during training.

    Hinton et al. (2018) start training with a spread-loss (Eq. 3) margin of
    0.2 and raise it linearly to 0.9, which keeps capsules in the early layers
    from dying. This callback assigns the margin through `self.model`, as
    `keras.callbacks.LearningRateScheduler` assigns the learning rate, so
    compiled train steps see the new value on every backend, and logs it as
    `logs["spread_margin"]`. It assigns the model's `spread_margin` variable
    where it has one (`MatrixCapsNet`, or a subclassed model with
    `self.spread_margin = keras.Variable(0.2, trainable=False)` compiled with
    `SpreadLoss(margin=self.spread_margin)`), else the `SpreadLoss` margin.
    On JAX, a model that does not track that variable (a functional model)
    has its train and test steps traced again at every change: for updates
    at every step, let the model own the variable. The margin is recomputed
    from the schedule at every update, so a resumed run continues it.

    Schedules, with `progress = position / ramp`, the position being the
    global step (`optimizer.iterations`) for `ramp_steps`, or the epoch
    (fractional with `update_freq="batch"`) for `ramp_epochs`:

    - `"linear"`: `initial + (final - initial) * min(1, progress)`, the
      paper's ramp.
    - `"sigmoid"`: `initial + (final - initial) * sigmoid(min(10, 8 *
      progress - 4))`, the official code's, which runs it from 0.2 to 0.99
      over 400,000 steps.
    - a callable `schedule(position) -> float`, called with the global step
      when `update_freq="batch"` and with the epoch index otherwise.

    Args:
        schedule: `"linear"`, `"sigmoid"` or a callable mapping the step
            or epoch to a margin. Defaults to `"linear"`.
        initial_margin: Float, the margin at the start of the ramp.
            Ignored by a callable schedule. Defaults to `0.2`.
        final_margin: Float, the margin at the end of the ramp. Ignored
            by a callable schedule. Defaults to `0.9`.
        ramp_steps: Positive number, the length of the ramp in optimizer
            steps. Give at most one of `ramp_steps` and `ramp_epochs`; with
            neither, the ramp lasts the official 400,000 steps. Defaults to
            `None`.
        ramp_epochs: Positive number, the length of the ramp in epochs.
            Defaults to `None`.
        update_freq: `"batch"` to update the margin before every step (every
            `steps_per_execution` steps when that is more than 1), `"epoch"`
            before every epoch. Defaults to `"batch"`.
        verbose: Integer, 0 for quiet, 1 to print the margin at the start
            of every epoch. Defaults to `0`.

    Raises:
        TypeError: If a margin is not a number, or `schedule` is neither a
            known name nor callable.
        ValueError: If a margin is negative, `schedule` or `update_freq` is
            unknown, both `ramp_steps` and `ramp_epochs` are given, a ramp is
            not positive, or a ramp is given with a callable schedule. When
            `fit` starts: if the model is not compiled with a `SpreadLoss`, or
            if the model's `spread_margin` is not the variable it reads.

    Example:

    >>> import numpy as np
    >>> import keras
    >>> import keras_capsules
    >>> inputs = keras.Input((4,))
    >>> outputs = keras.layers.Dense(3, activation="sigmoid")(inputs)
    >>> model = keras.Model(inputs, outputs)
    >>> model.compile("adam", keras_capsules.losses.SpreadLoss())
    >>> scheduler = keras_capsules.callbacks.SpreadMarginScheduler(
    ...     ramp_epochs=2, update_freq="epoch")
    >>> x = np.random.rand(8, 4).astype("float32")
    >>> y = keras.utils.to_categorical(np.arange(8) % 3, 3)
    >>> history = model.fit(x, y, epochs=3, callbacks=[scheduler], verbose=0)
    >>> [round(m, 2) for m in history.history["spread_margin"]]
    [0.2, 0.55, 0.9]

    Reference:
        - [Hinton et al., 2018](https://openreview.net/forum?id=HJWLfGWRb)
    """

    def __init__(
        self,
        schedule="linear",
        initial_margin=0.2,
        final_margin=0.9,
        ramp_steps=None,
        ramp_epochs=None,
        update_freq="batch",
        verbose=0,
    ):
        super().__init__()
        if isinstance(schedule, str):
            check_option(schedule, "schedule", _SCHEDULES)
        elif not callable(schedule):
            raise TypeError(
                f"Argument schedule must be one of {_SCHEDULES} or a "
                "callable mapping a step or epoch to a margin. "
                f"Received: schedule={schedule!r}"
            )
        check_non_negative_number(initial_margin, "initial_margin")
        check_non_negative_number(final_margin, "final_margin")
        check_positive_number(ramp_steps, "ramp_steps", allow_none=True)
        check_positive_number(ramp_epochs, "ramp_epochs", allow_none=True)
        if ramp_steps is not None and ramp_epochs is not None:
            raise ValueError(
                "Give at most one of ramp_steps and ramp_epochs. "
                f"Received: ramp_steps={ramp_steps}, "
                f"ramp_epochs={ramp_epochs}"
            )
        if callable(schedule) and (
            ramp_steps is not None or ramp_epochs is not None
        ):
            raise ValueError(
                "Arguments ramp_steps and ramp_epochs only apply to the "
                "built-in schedules; a callable schedule gets the step or "
                "epoch itself. "
                f"Received: ramp_steps={ramp_steps}, "
                f"ramp_epochs={ramp_epochs}"
            )
        check_option(update_freq, "update_freq", _UPDATE_FREQS)
        self.schedule = schedule
        self.initial_margin = initial_margin
        self.final_margin = final_margin
        self.ramp_steps = ramp_steps
        self.ramp_epochs = ramp_epochs
        self.update_freq = update_freq
        self.verbose = verbose
        if callable(schedule):
            self._counts_steps = update_freq == "batch"
        else:
            self._counts_steps = ramp_epochs is None
        self._margins = []
        self._retrace = False
        self._epoch = 0
        self._epoch_start_step = 0
        self._steps_per_epoch = None
        self._last_margin = None

    def on_train_begin(self, logs=None):
        self._margins = _margin_variables(self.model)
        if not self._margins:
            raise ValueError(
                "SpreadMarginScheduler found no margin to schedule: "
                "compile the model with keras_capsules.losses.SpreadLoss "
                "or give it a `spread_margin` keras.Variable. "
                f"Received: loss={getattr(self.model, 'loss', None)!r}"
            )
        tracked = self.model.non_trainable_variables
        self._retrace = freezes_untracked_variables() and not all(
            any(margin is variable for variable in tracked)
            for margin in self._margins
        )
        self._steps_per_epoch = (self.params or {}).get("steps")
        self._last_margin = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._epoch_start_step = int(
            ops.convert_to_numpy(self.model.optimizer.iterations)
        )
        margin = self._set_margin(batch=0)
        if self.verbose > 0:
            print(
                f"\nEpoch {epoch + 1}: SpreadMarginScheduler setting the "
                f"spread margin to {margin:.4f}."
            )

    def on_train_batch_begin(self, batch, logs=None):
        if self.update_freq == "batch":
            self._set_margin(batch=batch)

    def on_train_batch_end(self, batch, logs=None):
        if self.update_freq == "batch" and logs is not None:
            logs["spread_margin"] = self._last_margin

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None and self._margins:
            self._synced_model()
            logs["spread_margin"] = float(
                ops.convert_to_numpy(self._margins[0])
            )

    def margin_at(self, position):
        """Returns the scheduled margin at a step or epoch.

        Args:
            position: The global step when the ramp counts steps (or the
                schedule is a callable and `update_freq="batch"`), the
                epoch, possibly fractional, otherwise.

        Returns:
            The margin, a Python float.
        """
        if callable(self.schedule):
            margin = self.schedule(position)
            margin = float(ops.convert_to_numpy(margin))
            if not math.isfinite(margin) or margin < 0:
                raise ValueError(
                    "The schedule function must return a finite "
                    f"non-negative margin. Received: margin={margin} at "
                    f"position={position}"
                )
            return margin
        if self._counts_steps:
            ramp = self.ramp_steps or _DEFAULT_RAMP_STEPS
        else:
            ramp = self.ramp_epochs
        progress = position / ramp
        if self.schedule == "linear":
            fraction = min(1.0, max(0.0, progress))
        else:
            fraction = 1.0 / (
                1.0 + math.exp(-min(_SIGMOID_CAP, 8.0 * progress - 4.0))
            )
        span = self.final_margin - self.initial_margin
        return self.initial_margin + span * fraction

    def _position(self, batch):
        if self._counts_steps:
            if self.update_freq == "epoch":
                return self._epoch_start_step
            return self._epoch_start_step + batch
        if self.update_freq == "epoch" or not self._steps_per_epoch:
            return self._epoch
        return self._epoch + batch / self._steps_per_epoch

    def _set_margin(self, batch):
        margin = self.margin_at(self._position(batch))
        if margin != self._last_margin:
            model = self._synced_model()
            for variable in self._margins:
                variable.assign(margin)
            if self._retrace:
                # A step traced before may hold the old value as a
                # constant; tracing is deferred to the next call.
                model.make_train_function(force=True)
                if model.test_function is not None:
                    model.make_test_function(force=True)
            self._last_margin = margin
        return margin

    def _synced_model(self):
        # On JAX, `Callback.model` writes the training state back into the
        # variables and makes the next step read them again, so a value
        # assigned after this call reaches the next compiled step.
        return self.model

    def get_config(self):
        schedule = self.schedule
        if callable(schedule):
            schedule = keras.saving.serialize_keras_object(schedule)
        return {
            "schedule": schedule,
            "initial_margin": self.initial_margin,
            "final_margin": self.final_margin,
            "ramp_steps": self.ramp_steps,
            "ramp_epochs": self.ramp_epochs,
            "update_freq": self.update_freq,
            "verbose": self.verbose,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("schedule"), dict):
            config["schedule"] = keras.saving.deserialize_keras_object(
                config["schedule"]
            )
        return cls(**config)
