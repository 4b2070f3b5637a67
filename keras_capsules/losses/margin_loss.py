"""The margin loss of CapsNet (Sabour et al., 2017, Eq. 4)."""

import keras
from keras import ops

from keras_capsules._validation import check_option
from keras_capsules.losses._common import CLASS_REDUCTIONS
from keras_capsules.losses._common import prepare_inputs
from keras_capsules.losses._common import reduce_over_classes


def _check_hyperparameters(
    m_plus, m_minus, down_weight, reduction_over_classes
):
    for name, value in (
        ("m_plus", m_plus),
        ("m_minus", m_minus),
        ("down_weight", down_weight),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(
                f"Argument {name} must be a Python number. "
                f"Received: {name}={value!r}"
            )
    if not m_minus < m_plus:
        raise ValueError(
            "Argument m_minus must be smaller than m_plus: lengths above "
            "m_plus count as present and below m_minus as absent. "
            f"Received: m_minus={m_minus}, m_plus={m_plus}"
        )
    if down_weight < 0:
        raise ValueError(
            "Argument down_weight must be non-negative. "
            f"Received: down_weight={down_weight}"
        )
    check_option(
        reduction_over_classes, "reduction_over_classes", CLASS_REDUCTIONS
    )


@keras.saving.register_keras_serializable(package="keras_capsules")
def margin_loss(
    y_true,
    y_pred,
    m_plus=0.9,
    m_minus=0.1,
    down_weight=0.5,
    reduction_over_classes="sum",
):
    """Computes the CapsNet margin loss per sample.

    For each class `k` with target `T_k` (1 if the class is present, 0 if
    not) and capsule length `v_k`, Eq. 4 of the paper is

    ```python
    L_k = T_k * max(0, m_plus - v_k) ** 2
        + down_weight * (1 - T_k) * max(0, v_k - m_minus) ** 2
    ```

    and the loss of a sample is the sum of `L_k` over classes, as in the
    paper ("the total loss is simply the sum of the losses of all digit
    capsules"). Several classes may be present at once (multi-hot
    `y_true`, as in MultiMNIST).

    With `reduction_over_classes="mean"` the class terms are averaged
    instead, as the official TensorFlow code (Sarasra/models,
    `research/capsules/models/layers/layers.py`, `_margin_loss` and
    `evaluate`) does: it takes `reduce_mean` over batch and classes
    together. That code also scales both terms by 0.5, so its
    classification loss equals `0.5 * margin_loss(...,
    reduction_over_classes="mean")`, that is the paper's sum divided by
    `2 * num_classes` (20 for MNIST). The balance against the
    reconstruction loss (0.0005 times the per-image sum of squared errors)
    therefore differs between the paper's text and its code.

    The terms are computed in float32 (float64 inputs stay float64).

    See Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules"
    (NeurIPS 2017), Eq. 4.

    Args:
        y_true: One-hot or multi-hot targets, shape
            `(batch_size, num_classes)`.
        y_pred: Capsule lengths in `[0, 1]`, same shape as `y_true`, such
            as the output of `keras_capsules.layers.Length`.
        m_plus: Float, the length a present class must reach. Defaults to
            `0.9`.
        m_minus: Float, the length an absent class must stay under.
            Defaults to `0.1`.
        down_weight: Float, the weight `lambda` of the absent-class term,
            which keeps early training from shrinking every capsule.
            Defaults to `0.5`.
        reduction_over_classes: `"sum"` (the paper) or `"mean"` (the
            official code, without its extra factor 0.5). Defaults to
            `"sum"`.

    Returns:
        The loss of each sample, shape `(batch_size,)` (`y_pred.shape[:-1]`
        in general).

    Raises:
        TypeError: If a hyperparameter is not a Python number.
        ValueError: If `m_minus >= m_plus`, `down_weight < 0`,
            `reduction_over_classes` is unknown, or the shapes of `y_true`
            and `y_pred` differ.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> y_true = np.array([[0.0, 1.0, 0.0]], dtype="float32")
    >>> y_pred = np.array([[0.2, 0.8, 0.05]], dtype="float32")
    >>> loss = keras_capsules.losses.margin_loss(y_true, y_pred)
    >>> tuple(loss.shape)
    (1,)

    Reference:
        - [Sabour et al., 2017](https://arxiv.org/abs/1710.09829)
    """
    _check_hyperparameters(m_plus, m_minus, down_weight, reduction_over_classes)
    y_true, y_pred = prepare_inputs(
        y_true, y_pred, "margin_loss", "one-hot or multi-hot"
    )
    present = y_true * ops.square(ops.relu(m_plus - y_pred))
    absent = (1.0 - y_true) * ops.square(ops.relu(y_pred - m_minus))
    per_class = present + down_weight * absent
    return reduce_over_classes(per_class, reduction_over_classes)


@keras.saving.register_keras_serializable(package="keras_capsules")
class MarginLoss(keras.losses.Loss):
    """The CapsNet margin loss (Sabour et al., 2017, Eq. 4).

    The class capsule of each present class should be longer than
    `m_plus` and every other class capsule shorter than `m_minus`; the
    absent-class term is weighted by `down_weight`. `y_true` is one-hot,
    or multi-hot when several classes are present (MultiMNIST). See
    `keras_capsules.losses.margin_loss` for how `reduction_over_classes`
    relates to the official code.

    Formula:

    ```python
    per_class = (
        y_true * square(maximum(0, m_plus - y_pred))
        + down_weight * (1 - y_true) * square(maximum(0, y_pred - m_minus))
    )
    loss = sum(per_class, axis=-1)  # mean(...) with "mean"
    ```

    See Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules"
    (NeurIPS 2017), Eq. 4.

    Args:
        m_plus: Float, the length a present class must reach. Defaults to
            `0.9`.
        m_minus: Float, the length an absent class must stay under.
            Defaults to `0.1`.
        down_weight: Float, the weight `lambda` of the absent-class term.
            Defaults to `0.5`.
        reduction_over_classes: `"sum"` (the paper) or `"mean"` (the
            official code, without its extra factor 0.5). Defaults to
            `"sum"`.
        reduction: Type of reduction over the batch, as for every Keras
            loss: `"sum_over_batch_size"`, `"sum"`, `"mean"`,
            `"mean_with_sample_weight"`, `"none"` or `None`. Defaults to
            `"sum_over_batch_size"`.
        name: Name of the loss instance. Defaults to `"margin_loss"`.
        dtype: The dtype of the loss computations. Defaults to `None`,
            which means `keras.backend.floatx()`.

    Raises:
        TypeError: If a hyperparameter is not a Python number.
        ValueError: If `m_minus >= m_plus`, `down_weight < 0`, or
            `reduction_over_classes` is unknown; when called, if the shapes
            of `y_true` and `y_pred` differ.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> loss = keras_capsules.losses.MarginLoss()
    >>> y_true = np.array([[0.0, 1.0, 0.0]], dtype="float32")
    >>> y_pred = np.array([[0.2, 0.8, 0.05]], dtype="float32")
    >>> value = loss(y_true, y_pred)  # 0.01 + 0.5 * 0.01 = 0.015

    Reference:
        - [Sabour et al., 2017](https://arxiv.org/abs/1710.09829)
    """

    def __init__(
        self,
        m_plus=0.9,
        m_minus=0.1,
        down_weight=0.5,
        reduction_over_classes="sum",
        reduction="sum_over_batch_size",
        name="margin_loss",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        _check_hyperparameters(
            m_plus, m_minus, down_weight, reduction_over_classes
        )
        self.m_plus = m_plus
        self.m_minus = m_minus
        self.down_weight = down_weight
        self.reduction_over_classes = reduction_over_classes

    def call(self, y_true, y_pred):
        return margin_loss(
            y_true,
            y_pred,
            m_plus=self.m_plus,
            m_minus=self.m_minus,
            down_weight=self.down_weight,
            reduction_over_classes=self.reduction_over_classes,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "m_plus": self.m_plus,
                "m_minus": self.m_minus,
                "down_weight": self.down_weight,
                "reduction_over_classes": self.reduction_over_classes,
                "dtype": self.dtype,
            }
        )
        return config
