"""Temporary: models/ still import `DEFAULTS` from here.

Delete this file once models/ import it from `keras_capsules.ops.em._core`.
"""

from keras_capsules.ops.em._core import DEFAULTS  # noqa: F401
