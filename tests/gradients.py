"""The gradient of a scalar function of one tensor, on the active backend,
for tests that check derivatives against finite differences."""

import keras
import numpy as np
from keras import ops


def gradient(fn, x):
    """d fn(x) / d x at `x` (a float32 array), as a NumPy array."""
    x = np.asarray(x, dtype="float32")
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        variable = tf.Variable(x)
        with tf.GradientTape() as tape:
            value = fn(variable)
        return tape.gradient(value, variable).numpy()
    if backend == "jax":
        import jax

        return np.asarray(jax.grad(fn)(ops.convert_to_tensor(x)))
    if backend == "torch":
        import torch

        variable = torch.tensor(x, requires_grad=True)
        fn(variable).backward()
        return variable.grad.detach().numpy()
    raise NotImplementedError(backend)


def finite_difference(fn, x, step=1e-6):
    """Central differences of a float64 NumPy function."""
    x = np.asarray(x, dtype="float64")
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[index] += step
        minus[index] -= step
        grad[index] = (fn(plus) - fn(minus)) / (2 * step)
    return grad
