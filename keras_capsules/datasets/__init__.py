"""Public datasets of keras_capsules."""
