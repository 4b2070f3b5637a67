"""Constant padding that `torch.compile` can trace without recompiling."""

from keras import ops

from keras_capsules.ops._backend import pads_by_concatenation


def pad(x, pad_width, constant_values=0.0):
    """`keras.ops.pad(x, pad_width, constant_values=constant_values)`,
    written as a concatenation where `_backend.pads_by_concatenation`
    says so (PyTorch, whose shapes are always concrete)."""
    if not pads_by_concatenation(x):
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
