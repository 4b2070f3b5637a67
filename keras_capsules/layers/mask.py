"""The `Mask` layer: keeps the selected capsules for the decoder."""

import keras
from keras import ops


def _is_shape_list(input_shape):
    return (
        isinstance(input_shape, (list, tuple))
        and len(input_shape) > 0
        and isinstance(input_shape[0], (list, tuple))
    )


@keras.saving.register_keras_serializable(package="keras_capsules")
class Mask(keras.layers.Layer):
    """Zeroes all but the selected capsules and flattens the result.

    This is the input of the reconstruction decoder of CapsNet: "during
    training, we mask out all but the activity vector of the correct digit
    capsule", and at inference the capsule with the longest activity vector
    is kept instead. Called on capsules alone, the layer keeps the `top_k`
    longest capsules (`top_k=2` suits two-digit inputs such as MultiMNIST).
    Called on `[capsules, labels]`, it keeps the capsules that the one-hot
    or multi-hot `labels` select; label values are used as multiplicative
    weights, so pass 0/1 labels for the paper's masking.

    The mask carries no gradient (it is a selection), so gradients reach
    only the kept capsules. Lengths are compared in float32, so that
    capsules of any magnitude are ranked correctly under mixed precision.

    See Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules"
    (NeurIPS 2017), Section 4.1.

    Args:
        top_k: Positive integer, how many of the longest capsules to keep
            when no labels are given. Ignored when labels are given.
            Defaults to `1`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Either the capsules, a tensor of shape
            `(batch_size, num_capsules, capsule_dim)`, or a list
            `[capsules, labels]` where `labels` has shape
            `(batch_size, num_capsules)`.

    Input shape:
        `(batch_size, num_capsules, capsule_dim)`, or the list
        `[(batch_size, num_capsules, capsule_dim), (batch_size,
        num_capsules)]`.

    Output shape:
        `(batch_size, num_capsules * capsule_dim)`.

    Raises:
        TypeError: If `top_k` is not an integer.
        ValueError: If `top_k` is not positive or exceeds `num_capsules`,
            if the capsules are not of rank 3, or if the labels do not have
            shape `(batch_size, num_capsules)`.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> capsules = np.random.rand(2, 10, 16).astype("float32")
    >>> labels = np.eye(10, dtype="float32")[[3, 7]]
    >>> by_label = keras_capsules.layers.Mask()([capsules, labels])
    >>> by_length = keras_capsules.layers.Mask()(capsules)
    >>> tuple(by_label.shape), tuple(by_length.shape)
    ((2, 160), (2, 160))

    Reference:
        - [Sabour et al., 2017](https://arxiv.org/abs/1710.09829)
    """

    def __init__(self, top_k=1, **kwargs):
        super().__init__(**kwargs)
        if isinstance(top_k, bool) or not isinstance(top_k, int):
            raise TypeError(
                f"Argument top_k must be an integer. Received: top_k={top_k!r}"
            )
        if top_k < 1:
            raise ValueError(
                "Argument top_k must be a positive integer. "
                f"Received: top_k={top_k}"
            )
        self.top_k = top_k

    def build(self, input_shape):
        if _is_shape_list(input_shape):
            self.input_spec = [
                keras.InputSpec(ndim=3),
                keras.InputSpec(ndim=2),
            ]
        else:
            self.input_spec = keras.InputSpec(ndim=3)
        self.compute_output_shape(input_shape)

    def call(self, inputs):
        # Checked on every call, not only when built: a built layer takes
        # tensors of any shape.
        if isinstance(inputs, (list, tuple)):
            capsules, labels = inputs
            self.compute_output_shape(
                [tuple(capsules.shape), tuple(labels.shape)]
            )
            mask = ops.cast(labels, capsules.dtype)
        else:
            capsules = inputs
            self.compute_output_shape(tuple(capsules.shape))
            num_capsules = capsules.shape[1]
            squared_lengths = ops.sum(
                ops.square(ops.cast(capsules, "float32")), axis=-1
            )
            # Ranking by squared length avoids a sqrt and picks the same
            # capsules as ranking by length.
            _, indices = ops.top_k(squared_lengths, k=self.top_k)
            mask = ops.sum(
                ops.one_hot(indices, num_capsules, dtype=capsules.dtype),
                axis=1,
            )
        masked = capsules * ops.expand_dims(ops.stop_gradient(mask), -1)
        flat_dim = self._flat_dim(capsules.shape)
        if flat_dim is None:
            flat_dim = ops.shape(capsules)[1] * ops.shape(capsules)[2]
        return ops.reshape(masked, (-1, flat_dim))

    def _flat_dim(self, capsule_shape):
        num_capsules, capsule_dim = capsule_shape[1], capsule_shape[2]
        if num_capsules is None or capsule_dim is None:
            return None
        return num_capsules * capsule_dim

    def compute_output_shape(self, input_shape):
        if _is_shape_list(input_shape):
            if len(input_shape) != 2:
                raise ValueError(
                    "Mask expects either the capsules or the list "
                    "[capsules, labels]. Received: "
                    f"input_shape={_format(input_shape)}"
                )
            capsule_shape, label_shape = (tuple(s) for s in input_shape)
        else:
            capsule_shape, label_shape = tuple(input_shape), None
        if len(capsule_shape) != 3:
            raise ValueError(
                "Mask expects capsules of shape (batch_size, num_capsules, "
                "capsule_dim). Received: "
                f"input_shape={_format(input_shape)}"
            )
        num_capsules = capsule_shape[1]
        if label_shape is not None:
            batch_mismatch = (
                capsule_shape[0] is not None
                and label_shape[0] is not None
                and capsule_shape[0] != label_shape[0]
            )
            if (
                len(label_shape) != 2
                or batch_mismatch
                or (
                    num_capsules is not None
                    and label_shape[1] is not None
                    and label_shape[1] != num_capsules
                )
            ):
                raise ValueError(
                    "Mask expects labels of shape (batch_size, "
                    f"num_capsules) = (batch_size, {num_capsules}), one "
                    "value per capsule, next to capsules of shape "
                    "(batch_size, num_capsules, capsule_dim). Received: "
                    f"input_shape={_format(input_shape)}"
                )
        elif num_capsules is not None and self.top_k > num_capsules:
            raise ValueError(
                f"Argument top_k must be at most num_capsules "
                f"({num_capsules}) to select that many capsules. "
                f"Received: top_k={self.top_k}"
            )
        return (capsule_shape[0], self._flat_dim(capsule_shape))

    def get_config(self):
        config = super().get_config()
        config.update({"top_k": self.top_k})
        return config


def _format(input_shape):
    if _is_shape_list(input_shape):
        return [tuple(s) for s in input_shape]
    return tuple(input_shape)
