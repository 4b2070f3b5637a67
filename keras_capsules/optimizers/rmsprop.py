"""RMSprop whose squared-gradient average starts where TensorFlow 1's
did."""

import keras

from keras_capsules._validation import check_non_negative_number


@keras.saving.register_keras_serializable(package="keras_capsules")
class RMSprop(keras.optimizers.RMSprop):
    """`keras.optimizers.RMSprop` with a chosen start for its average of
    squared gradients.

    Keras starts the moving average of the squared gradients (the
    `velocity`) at 0; TensorFlow 1's `tf.train.RMSPropOptimizer` started
    it at 1. The update is otherwise the same in both,

        v = rho v + (1 - rho) g^2,
        m = momentum m + learning_rate g / sqrt(v + epsilon),
        w = w - m,

    but the start matters early in training: from 0 the first steps are
    about `learning_rate / sqrt(1 - rho)` whatever the size of the
    gradient, from 1 they are about `learning_rate g`. Code written for
    TensorFlow 1 (such as the official Stacked Capsule Autoencoders) was
    tuned with the latter; `initial_velocity=1.0` reproduces it.

    Args:
        learning_rate: Float or schedule. Defaults to `0.001`.
        rho: Float, the decay of the average. Defaults to `0.9`.
        momentum: Float. Defaults to `0.0`.
        epsilon: Float, added to the average inside the square root.
            Defaults to `1e-7`.
        centered: Boolean. Defaults to `False`.
        initial_velocity: Non-negative float, the initial value of the
            average of squared gradients. Defaults to `0.0` (Keras's).
        **kwargs: Other arguments of `keras.optimizers.RMSprop`.

    Example:

    >>> import keras_capsules
    >>> optimizer = keras_capsules.optimizers.RMSprop(
    ...     3e-5, momentum=0.9, epsilon=1e-2 / 128**2, initial_velocity=1.0
    ... )
    >>> optimizer.initial_velocity
    1.0
    """

    def __init__(
        self,
        learning_rate=0.001,
        rho=0.9,
        momentum=0.0,
        epsilon=1e-7,
        centered=False,
        initial_velocity=0.0,
        **kwargs,
    ):
        super().__init__(
            learning_rate=learning_rate,
            rho=rho,
            momentum=momentum,
            epsilon=epsilon,
            centered=centered,
            **kwargs,
        )
        self.initial_velocity = float(
            check_non_negative_number(initial_velocity, "initial_velocity")
        )

    def add_optimizer_variables(
        self, trainable_variables, name, initializer="zeros"
    ):
        # Keras's RMSprop creates its slots here, the velocities as
        # "velocity": they are created holding their initial value. An
        # assignment after creation would be lost where Keras builds the
        # optimizer inside a traced train function (TensorFlow keeps the
        # variables created in a trace with their initializers).
        if name == "velocity":
            initializer = keras.initializers.Constant(self.initial_velocity)
        return super().add_optimizer_variables(
            trainable_variables, name, initializer=initializer
        )

    def get_config(self):
        config = super().get_config()
        config["initial_velocity"] = self.initial_velocity
        return config
