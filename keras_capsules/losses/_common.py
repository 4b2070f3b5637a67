"""Private helpers shared by the capsule losses."""

import keras
from keras import ops

CLASS_REDUCTIONS = ("sum", "mean")


def prepare_inputs(y_true, y_pred, owner, targets):
    """Returns `y_true` and `y_pred` cast to the loss dtype, checked alike.

    The loss terms are computed in float32, or in float64 for float64
    predictions. `owner` and `targets` (such as `"one-hot"`) word the
    error for mismatched shapes.
    """
    y_pred = ops.convert_to_tensor(y_pred)
    dtype = keras.backend.standardize_dtype(y_pred.dtype)
    dtype = "float64" if dtype == "float64" else "float32"
    y_pred = ops.cast(y_pred, dtype)
    y_true = ops.cast(ops.convert_to_tensor(y_true), dtype)
    true_shape, pred_shape = tuple(y_true.shape), tuple(y_pred.shape)
    compatible = len(true_shape) == len(pred_shape) and len(pred_shape) >= 1
    if compatible:
        compatible = all(
            a is None or b is None or a == b
            for a, b in zip(true_shape, pred_shape)
        )
    if not compatible:
        raise ValueError(
            f"{owner} expects {targets} y_true of the same shape as "
            "y_pred, (batch_size, num_classes); convert integer labels "
            "with keras.ops.one_hot. Received: "
            f"y_true.shape={true_shape}, y_pred.shape={pred_shape}"
        )
    return y_true, y_pred


def reduce_over_classes(per_class, reduction_over_classes):
    if reduction_over_classes == "sum":
        return ops.sum(per_class, axis=-1)
    return ops.mean(per_class, axis=-1)
