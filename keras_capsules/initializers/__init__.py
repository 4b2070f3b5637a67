"""Public initializers of keras_capsules."""

from keras_capsules.initializers.fan_in_truncated_normal import (
    FanInTruncatedNormal,
)
