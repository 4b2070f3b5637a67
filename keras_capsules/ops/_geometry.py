"""Temporary: models/ still import `conv_output_length` from here.

Delete this file once models/ import it from `keras_capsules.ops._tiles`.
"""

from keras_capsules.ops._tiles import conv_output_length  # noqa: F401
