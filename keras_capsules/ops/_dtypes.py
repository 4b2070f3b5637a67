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


def matmul(a, b):
    """`keras.ops.matmul`, in float64 for float64 operands.

    Keras's `matmul` on PyTorch computes float64 operands in float32 and
    returns float32; `einsum` keeps float64. Every other dtype takes
    `keras.ops.matmul`, unchanged.
    """
    if keras.backend.standardize_dtype(a.dtype) == "float64":
        return keras.ops.einsum("...ij,...jk->...ik", a, b)
    return keras.ops.matmul(a, b)
