"""The dense layer the Stacked Capsule Autoencoder layers are made of."""

import keras

from keras_capsules.initializers.fan_in_truncated_normal import (
    FanInTruncatedNormal,
)


def linear(units, name, activation=None, dtype=None):
    """A `keras.layers.Dense` initialised as Sonnet 1's `Linear`: a
    `FanInTruncatedNormal` kernel and zero biases."""
    return keras.layers.Dense(
        units,
        activation=activation,
        kernel_initializer=FanInTruncatedNormal(),
        bias_initializer="zeros",
        dtype=dtype,
        name=name,
    )
