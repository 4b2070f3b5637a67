"""Public optimizers of keras_capsules."""

from keras_capsules.optimizers.rmsprop import RMSprop
