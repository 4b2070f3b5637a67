"""A callback that grows the spread-loss margin during training."""

import math

import keras
from keras import ops

from keras_capsules._validation import check_non_negative_number
from keras_capsules.losses.spread_loss import SpreadLoss

_SCHEDULES = ("linear", "sigmoid")
_UPDATE_FREQS = ("batch", "epoch")

# The official code (google-research, capsule_em/layers.py) sets the margin
# to 0.2 + 0.79 * sigmoid(min(10, step / 50000 - 4)): the sigmoid argument
# runs from -4 to +4 over 400k steps, then is capped at 10.
_DEFAULT_RAMP_STEPS = 400_000
_SIGMOID_CAP = 10.0

_TRACKER_ATTRIBUTE = "_spread_margin_tracker"


class _SpreadMarginTracker(keras.layers.Layer):
    """Makes a model track margin variables that it does not own.

    Compiled JAX train steps only receive the variables the model tracks;
    a margin read from anywhere else is frozen at trace time. Attached as
    a model attribute, this holder adds the variables to
    `model.non_trainable_variables` without changing the model's own
    variable list, so `.keras` files still load into a plain model: the
    holder's entries are skipped there, and the margin comes back through
    `SpreadLoss.get_config()`.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.margins = []

    def track(self, variable):
        if not any(v is variable for v in self.margins):
            self.margins.append(variable)


def _check_ramp(name, value):
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(
            f"Argument {name} must be a positive number or None. "
            f"Received: {name}={value!r}"
        )


def _margin_variables(model):
    """The margin variables of every SpreadLoss the model is compiled with.

    A model that owns a `spread_margin` variable (as `MatrixCapsNet` does)
    has it scheduled too, even when its loss is not a `SpreadLoss`.
    """
    found = []
    compiled_loss = getattr(model, "loss", None)
    candidates = (
        [] if compiled_loss is None else keras.tree.flatten(compiled_loss)
    )
    candidates = [c.margin for c in candidates if isinstance(c, SpreadLoss)]
    owned = getattr(model, "spread_margin", None)
    if isinstance(owned, keras.Variable):
        candidates.append(owned)
    for variable in candidates:
        if not any(v is variable for v in found):
            found.append(variable)
    return found


def _is_tracked(model, variable):
    return any(v is variable for v in model.non_trainable_variables)


def _track(model, variable):
    if _is_tracked(model, variable):
        return True
    tracker = getattr(model, _TRACKER_ATTRIBUTE, None)
    if not isinstance(tracker, _SpreadMarginTracker):
        tracker = _SpreadMarginTracker(name="spread_margin_tracker")
        try:
            setattr(model, _TRACKER_ATTRIBUTE, tracker)
        except ValueError:
            # A built subclassed model locks its state.
            return False
    tracker.track(variable)
    return _is_tracked(model, variable)


@keras.saving.register_keras_serializable(package="keras_capsules")
class SpreadMarginScheduler(keras.callbacks.Callback):
    """Grows the margin of `SpreadLoss` during training.

    Hinton et al. (2018) start training with a small margin of 0.2 and
    raise it linearly to 0.9, which keeps capsules in the early layers
    from dying. This callback assigns the margin
    variable of every `keras_capsules.losses.SpreadLoss` the model is
    compiled with (and the model's own `spread_margin` variable, such as
    that of `keras_capsules.models.MatrixCapsNet`) through `self.model`,
    the way `keras.callbacks.LearningRateScheduler` assigns the learning
    rate, so compiled train steps see the new value on TensorFlow, JAX and
    PyTorch. The value is logged as `logs["spread_margin"]`.

    On JAX a train step only sees variables the model tracks: when the
    loss's variable is not one of them, the callback attaches it to the
    model when `fit` starts. Functional models accept that; a subclassed
    model should own the variable (`self.spread_margin = keras.Variable(
    0.2, trainable=False)` in `__init__`) and compile with
    `SpreadLoss(margin=self.spread_margin)`.

    Schedules, with `progress = position / ramp` where the position is
    the global step (`optimizer.iterations`, so resumed training picks up
    where it stopped) when counting `ramp_steps`, or the epoch (fractional
    within an epoch when `update_freq="batch"`) when counting
    `ramp_epochs`:

    - `"linear"`: `initial + (final - initial) * min(1, progress)`, the
      paper's ramp.
    - `"sigmoid"`: `initial + (final - initial) *
      sigmoid(min(10, 8 * progress - 4))`, the official code's schedule,
      which it runs with `initial_margin=0.2`, `final_margin=0.99` and
      `ramp_steps=400_000` (that is `0.2 + 0.79 * sigmoid(min(10,
      step / 50000 - 4))`).
    - a callable `schedule(position) -> float`, called with the global
      step when `update_freq="batch"` and with the epoch index when
      `update_freq="epoch"`.

    See Hinton, Sabour & Frosst, "Matrix capsules with EM routing"
    (ICLR 2018), the spread loss (Eq. 3).

    Args:
        schedule: `"linear"`, `"sigmoid"` or a callable mapping the step
            or epoch to a margin. Defaults to `"linear"`.
        initial_margin: Float, the margin at the start of the ramp.
            Ignored by a callable schedule. Defaults to `0.2`.
        final_margin: Float, the margin at the end of the ramp. Ignored
            by a callable schedule. Defaults to `0.9`.
        ramp_steps: Positive number, the length of the ramp in optimizer
            steps. Give at most one of `ramp_steps` and `ramp_epochs`;
            with neither, the ramp lasts the official 400,000 steps.
            Defaults to `None`.
        ramp_epochs: Positive number, the length of the ramp in epochs.
            Defaults to `None`.
        update_freq: `"batch"` to update the margin before every step
            (every `steps_per_execution` steps when that is more than 1),
            `"epoch"` to update it before every epoch. Defaults to
            `"batch"`.
        verbose: Integer, 0 for quiet, 1 to print the margin at the start
            of every epoch. Defaults to `0`.

    Raises:
        TypeError: If a margin is not a number, or `schedule` is neither a
            known name nor callable.
        ValueError: If a margin is negative, `schedule` or `update_freq`
            is unknown, both `ramp_steps` and `ramp_epochs` are given, a
            ramp is not positive, or a ramp is given with a callable
            schedule. When `fit` starts: if the model is not compiled with
            a `SpreadLoss`, or its margin variable cannot be tracked by the
            model.

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
    >>> history = model.fit(x, y, epochs=3, callbacks=[scheduler],
    ...                     verbose=0)
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
            if schedule not in _SCHEDULES:
                raise ValueError(
                    f"Argument schedule must be one of {_SCHEDULES} or a "
                    f"callable. Received: schedule={schedule!r}"
                )
        elif not callable(schedule):
            raise TypeError(
                f"Argument schedule must be one of {_SCHEDULES} or a "
                "callable mapping a step or epoch to a margin. "
                f"Received: schedule={schedule!r}"
            )
        check_non_negative_number(initial_margin, "initial_margin")
        check_non_negative_number(final_margin, "final_margin")
        _check_ramp("ramp_steps", ramp_steps)
        _check_ramp("ramp_epochs", ramp_epochs)
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
        if update_freq not in _UPDATE_FREQS:
            raise ValueError(
                f"Argument update_freq must be one of {_UPDATE_FREQS}. "
                f"Received: update_freq={update_freq!r}"
            )
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
        self._epoch = 0
        self._epoch_start_step = 0
        self._steps_per_epoch = None
        self._last_margin = None

    def set_model(self, model):
        super().set_model(model)
        self._margins = _margin_variables(model)
        self._last_margin = None
        # Tracking must happen here, before `fit` builds its first train
        # step and before `BackupAndRestore.on_train_begin` reloads the
        # weights, whatever the order of the callbacks.
        for variable in self._margins:
            if not _track(model, variable):
                raise ValueError(
                    "SpreadMarginScheduler cannot make the model track "
                    "the margin variable of its SpreadLoss, so compiled "
                    "JAX train steps would not see the margin change. "
                    "Build the model with the functional API, or create "
                    "the variable in your model's __init__ "
                    "(self.spread_margin = keras.Variable(0.2, "
                    "trainable=False)) and compile with "
                    "SpreadLoss(margin=self.spread_margin). "
                    f"Received: model={model.__class__.__name__}"
                    f"(name={model.name!r})"
                )

    def on_train_begin(self, logs=None):
        if not self._margins:
            self._margins = _margin_variables(self.model)
            for variable in self._margins:
                _track(self.model, variable)
        if not self._margins:
            raise ValueError(
                "SpreadMarginScheduler found no margin to schedule: "
                "compile the model with keras_capsules.losses.SpreadLoss "
                "or give it a `spread_margin` keras.Variable. "
                f"Received: loss={getattr(self.model, 'loss', None)!r}"
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
            self._synced_model()
            for variable in self._margins:
                variable.assign(margin)
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
