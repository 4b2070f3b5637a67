"""Public losses of keras_capsules."""

from keras_capsules.losses.margin_loss import MarginLoss
from keras_capsules.losses.margin_loss import margin_loss
from keras_capsules.losses.spread_loss import SpreadLoss
from keras_capsules.losses.spread_loss import spread_loss
from keras_capsules.losses.stacked_capsule_autoencoder_loss import (
    StackedCapsuleAutoencoderLoss,
)
from keras_capsules.losses.stacked_capsule_autoencoder_loss import (
    stacked_capsule_autoencoder_loss,
)
