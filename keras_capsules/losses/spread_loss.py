"""The spread loss of matrix capsules (Hinton et al., 2018, Eq. 3)."""

import math

import keras
from keras import ops

from keras_capsules._validation import check_option
from keras_capsules.losses._common import CLASS_REDUCTIONS
from keras_capsules.losses._common import prepare_inputs
from keras_capsules.losses._common import reduce_over_classes


def _check_margin(margin):
    if isinstance(margin, keras.Variable):
        if tuple(margin.shape) != ():
            raise ValueError(
                "Argument margin must be a scalar variable. "
                f"Received: margin.shape={tuple(margin.shape)}"
            )
        if margin.trainable:
            raise ValueError(
                "Argument margin must be a non-trainable variable: it is "
                "scheduled by SpreadMarginScheduler, not learned. Create it "
                "with keras.Variable(..., trainable=False). "
                f"Received: margin={margin}"
            )
        return
    if isinstance(margin, bool) or not isinstance(margin, (int, float)):
        raise TypeError(
            "Argument margin must be a Python number or a scalar "
            f"non-trainable keras.Variable. Received: margin={margin!r}"
        )
    if not math.isfinite(margin) or margin < 0:
        raise ValueError(
            "Argument margin must be a finite non-negative number. "
            f"Received: margin={margin}"
        )


@keras.saving.register_keras_serializable(package="keras_capsules")
def spread_loss(y_true, y_pred, margin=0.2, reduction_over_classes="sum"):
    """Computes the matrix-capsule spread loss per sample.

    With target class `t` and class activations `a`, Eq. 3 of the paper
    penalises every wrong class `i` whose activation comes closer than
    `margin` to the target activation:

    ```python
    L_i = max(0, margin - (a_t - a_i)) ** 2      # i != t
    L = sum(L_i for i != t)
    ```

    The loss is zero once the target activation beats every other one by
    at least `margin`. Training starts with a small margin (0.2) that grows
    towards 0.9 (see `keras_capsules.callbacks.SpreadMarginScheduler`),
    which the paper found avoids dead capsules in the early layers.

    With `reduction_over_classes="mean"` the class terms are averaged
    instead of summed, as in the official TensorFlow code
    (google-research, `capsule_em/layers.py`, `order_loss` and
    `optimizer`), which takes a mean over batch and classes together: its
    loss is the paper's divided by `num_classes`.

    The terms are computed in float32 (float64 inputs stay float64).

    See Hinton, Sabour & Frosst, "Matrix capsules with EM routing"
    (ICLR 2018), Eq. 3.

    Args:
        y_true: One-hot targets, shape `(batch_size, num_classes)`.
        y_pred: Class activations, same shape as `y_true`, such as the
            activations of `keras_capsules.layers.EMClassCaps`.
        margin: Python float, scalar tensor or scalar non-trainable
            `keras.Variable`, the margin `m`. Defaults to `0.2`.
        reduction_over_classes: `"sum"` (the paper) or `"mean"` (the
            official code). Defaults to `"sum"`.

    Returns:
        The loss of each sample, shape `(batch_size,)` (`y_pred.shape[:-1]`
        in general).

    Raises:
        TypeError: If `margin` is `None`, a boolean or a string.
        ValueError: If a Python `margin` is negative or not finite,
            `reduction_over_classes` is unknown, or the shapes of `y_true`
            and `y_pred` differ.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> y_true = np.array([[0.0, 1.0, 0.0]], dtype="float32")
    >>> y_pred = np.array([[0.5, 0.6, 0.1]], dtype="float32")
    >>> loss = keras_capsules.losses.spread_loss(y_true, y_pred, margin=0.2)
    >>> tuple(loss.shape)  # (0.2 - 0.1) ** 2 = 0.01
    (1,)

    Reference:
        - [Hinton et al., 2018](https://openreview.net/forum?id=HJWLfGWRb)
    """
    if margin is None or isinstance(
        margin, (bool, int, float, str, bytes, keras.Variable)
    ):
        _check_margin(margin)
    check_option(
        reduction_over_classes, "reduction_over_classes", CLASS_REDUCTIONS
    )
    y_true, y_pred = prepare_inputs(y_true, y_pred, "spread_loss", "one-hot")
    margin = ops.cast(margin, y_pred.dtype)
    target = ops.sum(y_true * y_pred, axis=-1, keepdims=True)
    # The target class would contribute max(0, m)^2 = m^2 for free; the
    # (1 - y_true) mask keeps it out of the sum over i != t.
    per_class = (1.0 - y_true) * ops.square(
        ops.relu(margin - (target - y_pred))
    )
    return reduce_over_classes(per_class, reduction_over_classes)


@keras.saving.register_keras_serializable(package="keras_capsules")
class SpreadLoss(keras.losses.Loss):
    """The matrix-capsule spread loss (Hinton et al., 2018, Eq. 3).

    Pushes the activation of the target class above every other class
    activation by at least `margin`. The margin is real state: a scalar
    non-trainable `keras.Variable` (`self.margin`) that compiled train
    steps read on every step, so `SpreadMarginScheduler` can grow it from
    0.2 to 0.9 during `fit` on TensorFlow, JAX and PyTorch alike. A plain
    Python float would be frozen into compiled TensorFlow and JAX steps.

    `keras_capsules.models.MatrixCapsNet` owns its margin variable and
    its `compile()` makes the loss read it. A subclassed model can own the
    variable too and pass it in: `SpreadLoss(margin=self.spread_margin)`.
    `SpreadMarginScheduler` assigns the model's variable, or else the
    loss's own.

    `get_config()` stores the current value of the margin, so a model
    saved mid-schedule reloads with the margin it had reached.

    Formula:

    ```python
    target = sum(y_true * y_pred, axis=-1, keepdims=True)
    per_class = (1 - y_true) * square(maximum(0, margin - (target - y_pred)))
    loss = sum(per_class, axis=-1)  # mean(...) with "mean"
    ```

    See Hinton, Sabour & Frosst, "Matrix capsules with EM routing"
    (ICLR 2018), Eq. 3.

    Args:
        margin: Python float, the initial margin, or a scalar
            non-trainable `keras.Variable` to share (its current value is
            what the loss uses). Defaults to `0.2`, the paper's start.
        reduction_over_classes: `"sum"` (the paper) or `"mean"` (the
            official code). Defaults to `"sum"`.
        reduction: Type of reduction over the batch, as for every Keras
            loss: `"sum_over_batch_size"`, `"sum"`, `"mean"`,
            `"mean_with_sample_weight"`, `"none"` or `None`. Defaults to
            `"sum_over_batch_size"`.
        name: Name of the loss instance. Defaults to `"spread_loss"`.
        dtype: The dtype of the loss computations. Defaults to `None`,
            which means `keras.backend.floatx()`.

    Raises:
        TypeError: If `margin` is neither a number nor a `keras.Variable`.
        ValueError: If `margin` is negative, not finite, trainable or not a
            scalar, or `reduction_over_classes` is unknown; when called, if
            the shapes of `y_true` and `y_pred` differ.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> loss = keras_capsules.losses.SpreadLoss(margin=0.2)
    >>> y_true = np.array([[0.0, 1.0, 0.0]], dtype="float32")
    >>> y_pred = np.array([[0.5, 0.6, 0.1]], dtype="float32")
    >>> value = loss(y_true, y_pred)  # (0.2 - 0.1) ** 2 = 0.01
    >>> _ = loss.margin.assign(0.9)  # what SpreadMarginScheduler does

    Reference:
        - [Hinton et al., 2018](https://openreview.net/forum?id=HJWLfGWRb)
    """

    def __init__(
        self,
        margin=0.2,
        reduction_over_classes="sum",
        reduction="sum_over_batch_size",
        name="spread_loss",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        _check_margin(margin)
        check_option(
            reduction_over_classes, "reduction_over_classes", CLASS_REDUCTIONS
        )
        if not isinstance(margin, keras.Variable):
            margin = keras.Variable(
                float(margin),
                dtype="float32",
                trainable=False,
                name="spread_margin",
            )
        self.margin = margin
        self.reduction_over_classes = reduction_over_classes

    def call(self, y_true, y_pred):
        return spread_loss(
            y_true,
            y_pred,
            margin=self.margin,
            reduction_over_classes=self.reduction_over_classes,
        )

    def get_config(self):
        config = super().get_config()
        margin = float(ops.convert_to_numpy(self.margin))
        config.update(
            {
                # Seven significant digits drop the float32 noise (0.2 is
                # stored as 0.20000000298...) and still round-trip.
                "margin": float(f"{margin:.7g}"),
                "reduction_over_classes": self.reduction_over_classes,
                "dtype": self.dtype,
            }
        )
        return config
