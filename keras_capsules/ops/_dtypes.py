"""Private dtype choice shared by the capsule ops."""

import keras

_HALF_DTYPES = ("float16", "bfloat16")


def compute_dtypes(x):
    """Returns `(dtype, compute_dtype)` for a tensor entering an op.

    `dtype` is the one the results are cast back to: the float dtype of `x`,
    or `keras.config.floatx()` for integer inputs. `compute_dtype` is
    `float32` for `float16` and `bfloat16`, whose squares overflow or lose
    the precision that routing needs, and `dtype` otherwise.
    """
    dtype = keras.backend.standardize_dtype(x.dtype)
    if not keras.backend.is_float_dtype(dtype):
        dtype = keras.config.floatx()
    compute_dtype = "float32" if dtype in _HALF_DTYPES else dtype
    return dtype, compute_dtype
