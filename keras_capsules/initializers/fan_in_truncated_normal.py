"""A truncated normal whose width follows the fan-in of the weight."""

import math

import keras

from keras_capsules._validation import check_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class FanInTruncatedNormal(keras.initializers.TruncatedNormal):
    """A normal of standard deviation `1 / sqrt(fan_in)`, truncated at two
    standard deviations and not rescaled after the truncation.

    The default initialisation of the weights of Sonnet 1's `Linear` and
    `Conv2D` modules, which the official Stacked Capsule Autoencoders code
    relies on; the Stacked Capsule Autoencoder layers use it for their
    dense and convolution kernels (their biases start at zero). The
    draw is `keras.initializers.TruncatedNormal`'s with
    `stddev=1 / sqrt(fan_in)`.

    Args:
        fan_in: Optional positive int, the number of inputs of each unit.
            `None` takes it from the shape: the product of all axes but the
            last (`(fan_in, units)` dense kernels, `(height, width,
            in_channels, filters)` convolution kernels). Kernels with
            other leading axes, such as one dense kernel per capsule of
            shape `(capsules, fan_in, units)`, need it explicitly.
            Defaults to `None`.
        seed: Optional int or `keras.random.SeedGenerator`, as for Keras's
            random initializers. Defaults to `None`.

    Example:

    >>> import keras
    >>> import keras_capsules
    >>> initializer = keras_capsules.initializers.FanInTruncatedNormal()
    >>> kernel = keras.ops.convert_to_numpy(initializer((400, 100)))
    >>> bool(abs(kernel).max() <= 2 / 400**0.5)
    True
    """

    def __init__(self, fan_in=None, seed=None):
        self.fan_in = check_int(fan_in, "fan_in", minimum=1, allow_none=True)
        super().__init__(mean=0.0, stddev=1.0, seed=seed)

    def __call__(self, shape, dtype=None):
        fan_in = self.fan_in
        if fan_in is None:
            fan_in = math.prod(shape[:-1])
        return keras.random.truncated_normal(
            shape,
            mean=0.0,
            stddev=1.0 / math.sqrt(max(fan_in, 1)),
            dtype=dtype,
            seed=self.seed,
        )

    def get_config(self):
        config = super().get_config()
        del config["mean"], config["stddev"]
        config["fan_in"] = self.fan_in
        return config
