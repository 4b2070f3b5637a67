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
        parts = []
        for width in (before, after):
            shape = list(x.shape)
            shape[axis] = width
            parts.append(
                ops.full(shape, constant_values, x.dtype) if width else None
            )
        if parts[0] is None and parts[1] is None:
            continue
        x = ops.concatenate(
            [part for part in (parts[0], x, parts[1]) if part is not None],
            axis=axis,
        )
    return x
