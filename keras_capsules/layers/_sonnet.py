"""Sonnet 1's default initializers, which the official Stacked Capsule
Autoencoders code relies on, as Keras initializers."""

import math

import keras


def linear_initializer(fan_in, seed=None):
    """Sonnet 1's default for the weights of `Linear` and `Conv2D`: a
    normal of standard deviation `1 / sqrt(fan_in)` truncated at two
    standard deviations (and not rescaled after the truncation), as
    `keras.initializers.TruncatedNormal` draws it."""
    return keras.initializers.TruncatedNormal(
        stddev=1.0 / math.sqrt(fan_in), seed=seed
    )


def dense(units, fan_in, activation=None, use_bias=True, name=None):
    """`snt.Linear(units)` (after its input of size `fan_in`) as a Keras
    `Dense` with Sonnet's initialisation: zero biases."""
    return keras.layers.Dense(
        units,
        activation=activation,
        use_bias=use_bias,
        kernel_initializer=linear_initializer(fan_in),
        bias_initializer="zeros",
        name=name,
    )
