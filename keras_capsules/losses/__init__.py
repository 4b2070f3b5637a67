"""Public losses of keras_capsules."""
