"""The `Length` layer: capsule lengths as class probabilities."""

import keras
from keras import ops

from keras_capsules.ops._dtypes import compute_dtypes


@keras.saving.register_keras_serializable(package="keras_capsules")
class Length(keras.layers.Layer):
    """Computes the Euclidean length of each capsule.

    In a capsule network the length of a capsule's activity vector is the
    probability that the entity it represents is present. Applied to the
    class capsules of `CapsNet` (`DigitCaps` in the paper), it turns the
    `(batch, num_classes, capsule_dim)` output into `(batch, num_classes)`
    scores in `[0, 1)` that the margin loss is computed on.

    The length is `sqrt(sum(x**2, axis) + epsilon)` with
    `epsilon = keras.config.epsilon()` inside the square root, so that its
    gradient stays finite (zero) for an all-zero capsule, where the exact
    norm is not differentiable. The price is a floor of `sqrt(epsilon)`
    (about `3e-4` with the default `1e-7`) on every length. The sum runs in
    float32 under mixed precision, because squares of float16 activations
    overflow above 256, and the result is cast back to the compute dtype.

    See Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules"
    (NeurIPS 2017), Section 2.

    Args:
        axis: Integer, the axis holding the capsule dimension, the one
            reduced. Must not be the batch axis. Defaults to `-1`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Input shape:
        A tensor of rank at least 2, typically
        `(batch_size, num_capsules, capsule_dim)`.

    Output shape:
        The input shape without `axis`, typically
        `(batch_size, num_capsules)`.

    Raises:
        TypeError: If `axis` is not an integer.
        ValueError: If `axis` is out of range for the input, or is the batch
            axis.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> capsules = np.array([[[3.0, 4.0], [0.0, 0.0]]], dtype="float32")
    >>> lengths = keras_capsules.layers.Length()(capsules)
    >>> tuple(lengths.shape)
    (1, 2)

    Reference:
        - [Sabour et al., 2017](https://arxiv.org/abs/1710.09829)
    """

    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        if isinstance(axis, bool) or not isinstance(axis, int):
            raise TypeError(
                f"Argument axis must be an integer. Received: axis={axis!r}"
            )
        self.axis = axis
        self.input_spec = keras.InputSpec(min_ndim=2)

    def _canonical_axis(self, rank, input_shape):
        axis = self.axis + rank if self.axis < 0 else self.axis
        if not 0 <= axis < rank:
            raise ValueError(
                f"Argument axis={self.axis} is out of range for an input of "
                f"rank {rank}. Received: input_shape={tuple(input_shape)}"
            )
        if axis == 0:
            raise ValueError(
                "Argument axis must not point at the batch axis (0): the "
                "capsule dimension is reduced per sample. Received: "
                f"axis={self.axis}"
            )
        return axis

    def build(self, input_shape):
        self.compute_output_shape(input_shape)

    def call(self, inputs):
        axis = self._canonical_axis(len(inputs.shape), inputs.shape)
        # float32 for half-precision inputs, the inputs' own float dtype
        # otherwise (float64 stays float64).
        _, compute_dtype = compute_dtypes(inputs)
        squares = ops.square(ops.cast(inputs, compute_dtype))
        lengths = ops.sqrt(ops.sum(squares, axis=axis) + keras.config.epsilon())
        return ops.cast(lengths, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        axis = self._canonical_axis(len(input_shape), input_shape)
        return input_shape[:axis] + input_shape[axis + 1 :]

    def get_config(self):
        config = super().get_config()
        config.update({"axis": self.axis})
        return config
