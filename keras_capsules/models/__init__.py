"""Public models of keras_capsules."""

from keras_capsules.models.capsnet import CapsNet
from keras_capsules.models.efficient_capsnet import EfficientCapsNet
from keras_capsules.models.matrix_capsnet import MatrixCapsNet
