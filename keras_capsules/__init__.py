"""Capsule networks for Keras 3.

Three routing families: dynamic routing-by-agreement (Sabour et al., 2017),
matrix capsules with EM routing (Hinton et al., 2018) and self-attention
routing (Efficient-CapsNet, Mazzia et al., 2021); and Stacked Capsule
Autoencoders (Kosiorek et al., 2019), capsules learned without labels. Runs
on TensorFlow, JAX and PyTorch through `keras.ops`.
"""

from keras_capsules import callbacks
from keras_capsules import datasets
from keras_capsules import initializers
from keras_capsules import layers
from keras_capsules import losses
from keras_capsules import metrics
from keras_capsules import models
from keras_capsules import ops
from keras_capsules import optimizers
from keras_capsules.version import __version__
from keras_capsules.version import version

__all__ = [
    "__version__",
    "callbacks",
    "datasets",
    "initializers",
    "layers",
    "losses",
    "metrics",
    "models",
    "ops",
    "optimizers",
    "version",
]
