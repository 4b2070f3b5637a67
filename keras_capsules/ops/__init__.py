"""Public ops of keras_capsules."""
