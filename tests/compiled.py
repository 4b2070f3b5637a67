"""A function called as one compiled function on JAX, as a compiled step
calls it.

Called eagerly, JAX compiles each operation on its own for every new
shape: one eager call of `em_conv_routing` on new shapes took 6.5 s, the
same call under `jax.jit` 1.2 s (2-core AMD EPYC); the small MatrixCapsNet
preset with new classes, called once, 32 s eagerly and 6 s under `jax.jit`
(beside another job). Tests that run on JAX and whose subject is not the
eager path call through `compiled`: the EM routing's reference, layout,
normalisation and degenerate-input checks, and the networks' outputs that
a test compares with something else (MatrixCapsNet's `class_capsules`,
CapsNet's and EfficientCapsNet's `reconstruct` and losses). Other tests
call the same ops and networks eagerly, so both paths stay covered.
TensorFlow and PyTorch call the function as it is.
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


def inference_loss(model):
    """`model.compute_loss` at inference, as a function of the arrays `x`,
    `y`, `y_pred` and `sample_weight` in this order (for `compiled`)."""

    def loss(*arrays):
        x, y, y_pred, sample_weight = map(keras.ops.convert_to_tensor, arrays)
        return model.compute_loss(
            x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=False
        )

    return loss
