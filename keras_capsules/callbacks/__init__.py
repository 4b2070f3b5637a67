"""Public callbacks of keras_capsules."""

from keras_capsules.callbacks.capsule_health import CapsuleHealth
from keras_capsules.callbacks.dataset_epoch import DatasetEpoch
from keras_capsules.callbacks.spread_margin_scheduler import (
    SpreadMarginScheduler,
)
