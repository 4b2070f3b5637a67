"""Public layers of keras_capsules."""
