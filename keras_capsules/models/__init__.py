"""Public models of keras_capsules."""
