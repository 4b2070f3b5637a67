"""`compute_loss` at inference on arrays, for the loss checks of CapsNet
and EfficientCapsNet."""

import keras


def inference_loss(model, x, y, y_pred, sample_weight):
    """`model.compute_loss` with `training=False`, the arrays as tensors."""
    x, y, y_pred, sample_weight = map(
        keras.ops.convert_to_tensor, (x, y, y_pred, sample_weight)
    )
    return model.compute_loss(
        x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=False
    )
