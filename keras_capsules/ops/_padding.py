"""Constant padding that `torch.compile` can trace without recompiling."""

import keras
from keras import ops


def pad(x, pad_width, constant_values=0.0):
    """`keras.ops.pad(x, pad_width, constant_values=constant_values)`.

    `keras.ops.pad` creates a new `Operation`, with a new unique name,
    on every call; under `torch.compile` (`jit_compile=True` on PyTorch)
    the graph then depends on Keras's global name counter and is traced
    again at every training step. On PyTorch, where shapes are always
    concrete, the padding is concatenated instead.
    """
    if keras.backend.backend() != "torch" or isinstance(x, keras.KerasTensor):
        return ops.pad(x, pad_width, constant_values=constant_values)
    for axis, (before, after) in enumerate(pad_width):
        if before or after:
            x = ops.concatenate(
                _filler(x, axis, before, constant_values)
                + [x]
                + _filler(x, axis, after, constant_values),
                axis=axis,
            )
    return x


def _filler(x, axis, width, value):
    """`[block]` of `width` entries of `value` along `axis`; `[]` if 0."""
    if not width:
        return []
    shape = list(x.shape)
    shape[axis] = width
    return [ops.full(shape, value, x.dtype)]
