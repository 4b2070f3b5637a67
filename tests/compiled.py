"""A function called as one compiled function on JAX, as a compiled step
calls it.

Called eagerly, JAX compiles each operation on its own for every new
shape: one eager call of `em_conv_routing` on new shapes took 6.5 s, the
same call under `jax.jit` 1.2 s (2-core AMD EPYC); the small MatrixCapsNet
preset with new classes, called once, 32 s eagerly and 6 s under `jax.jit`
(beside another job). Tests that run on JAX and whose subject is not the
eager path call through `compiled`: the EM routing's reference, layout,
normalisation and degenerate-input checks, and MatrixCapsNet's
`class_capsules` compared with its `predict`. TensorFlow and PyTorch call
the function as it is; the eager checks of ops and layers run there only
(docs/development.md).
"""

import functools

import keras


def compiled(function, **static):
    """Returns `function` with the keyword arguments `static` bound, taking
    its array arguments positionally; under `jax.jit` on JAX."""
    call = functools.partial(function, **static)
    if keras.backend.backend() != "jax":
        return call
    import jax  # noqa: TID251

    return jax.jit(call)
