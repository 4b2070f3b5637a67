"""Public callbacks of keras_capsules."""
