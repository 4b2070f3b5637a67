"""The models that `benchmarks.run` measures, with their data.

`build(spec, rng)` builds, compiles and feeds one measurement point:
`spec` is a row of `benchmarks.run` (its `model`, `impl`, `config`,
`batch_size`, `routing_iterations`, `image_size` and `jit`), `rng` a NumPy
generator for the random batch. It returns `(model, x, y)`, ready for
`train_on_batch(x, y)` and `predict_on_batch(x)`.

The package's models are compiled with their own `compile()` defaults; a
`jit` of `True` or `False` (`--jit`, `--no-jit`) is passed on because the
benchmark then measures it. The plain functional models (the single
layers, and the naive `MatrixCapsNet`) are compiled with the setting the
package's models resolve to (`common.default_jit_compile`), which on
TensorFlow without a GPU differs from Keras' own `"auto"`, so that the
two implementations of a comparison are compiled alike.

The naive EM layer of `benchmarks/naive_em.py` is built from the same seed
as the `ours` point and given its weights, so both start from the same
parameters.
"""

import keras
import numpy as np

import keras_capsules
from benchmarks import common
from benchmarks import naive_em

MODELS = (
    "capsnet",
    "efficient_capsnet",
    "matrix_capsnet",
    "em_conv_caps",
    "dense_caps",
)
# The models with a naive EM implementation to compare with.
NAIVE_MODELS = ("matrix_capsnet", "em_conv_caps")
DEFAULT_BATCH = {
    "capsnet": 100,
    "efficient_capsnet": 100,
    "matrix_capsnet": 32,
    "em_conv_caps": 32,
    "dense_caps": 100,
}
DEFAULT_IMAGE_SIZE = {
    "capsnet": 28,
    "efficient_capsnet": 28,
    "matrix_capsnet": 32,
}
# ConvCaps1 of the paper: the 14x14 grid of primary capsules of a 32x32
# image, B input types, C output types, 3x3 window, stride 2.
EM_CONV_CAPS_CONFIGS = {
    "full": {"grid_size": 14, "num_in": 32, "num_out": 32},
    "small": {"grid_size": 14, "num_in": 8, "num_out": 16},
}
# DigitCaps of CapsNet: 6 * 6 * 32 primary capsules of 8D to 10 of 16D.
DENSE_CAPS_SHAPE = {"num_in": 1152, "dim_in": 8, "num_out": 10, "dim": 16}
MATRIX_NUM_CLASSES = 5
CAPSNET_NUM_CLASSES = 10


def one_hot(rng, batch_size, num_classes):
    """A batch of random one-hot labels, float32."""
    labels = rng.integers(0, num_classes, size=batch_size)
    return np.eye(num_classes, dtype="float32")[labels]


def _model_compile_arguments(spec):
    """What to pass to a package model's own `compile()`: the benchmark's
    explicit `jit` only, its defaults otherwise."""
    return {} if spec["jit"] is None else {"jit_compile": spec["jit"]}


def matrix_capsnet_arguments(spec):
    """The `MatrixCapsNet` constructor arguments of a point."""
    size = spec["image_size"]
    return {
        "image_shape": (size, size, 1),
        "num_classes": MATRIX_NUM_CLASSES,
        "routing_iterations": spec["routing_iterations"],
        **common.MATRIX_CAPSNET_CONFIGS[spec["config"]],
    }


def _build_matrix_capsnet(spec, rng):
    arguments = matrix_capsnet_arguments(spec)
    model = keras_capsules.models.MatrixCapsNet(**arguments)
    if spec["impl"] == "naive":
        naive = naive_em.naive_matrix_capsnet(**arguments)
        naive_em.copy_weights(model, naive)
        model = naive
        naive_em.compile_like_matrix_capsnet(
            model, jit_compile=common.default_jit_compile(spec["jit"])
        )
    else:
        # The official schedule, as the recorded figures used; every
        # schedule costs the same per step.
        model.compile(
            optimizer=common.official_matrix_optimizer(),
            **_model_compile_arguments(spec),
        )
    return (model, *batch(spec, rng))


def batch(spec, rng):
    """The random batch `(x, y)` of a `capsnet`, `efficient_capsnet` or
    `matrix_capsnet` point: images in [0, 1) (normal for `matrix_capsnet`)
    and one-hot labels, drawn from `rng` before anything else draws from
    it, so that a process given the same seed draws the same batch."""
    size, batch_size = spec["image_size"], spec["batch_size"]
    if spec["model"] == "matrix_capsnet":
        x = rng.standard_normal((batch_size, size, size, 1))
        return x.astype("float32"), one_hot(rng, batch_size, MATRIX_NUM_CLASSES)
    x = rng.uniform(size=(batch_size, size, size, 1)).astype("float32")
    return x, one_hot(rng, batch_size, CAPSNET_NUM_CLASSES)


def _build_efficient_capsnet(spec, rng):
    size = spec["image_size"]
    model = keras_capsules.models.EfficientCapsNet(image_shape=(size, size, 1))
    model.compile(**_model_compile_arguments(spec))
    return (model, *batch(spec, rng))


def _build_capsnet(spec, rng):
    size = spec["image_size"]
    model = keras_capsules.models.CapsNet(
        image_shape=(size, size, 1),
        num_classes=CAPSNET_NUM_CLASSES,
        routing_iterations=spec["routing_iterations"],
    )
    model.compile(**_model_compile_arguments(spec))
    return (model, *batch(spec, rng))


def em_conv_caps_model(config, routing_iterations, impl="ours"):
    """ConvCaps1 alone (`EMConvCaps`, or the naive layer for `impl="naive"`),
    its flattened poses and activations as one output tensor.

    `config` is a key of `EM_CONV_CAPS_CONFIGS`. Returns an uncompiled
    functional `keras.Model` of the inputs `[poses, activations]`.
    """
    geometry = EM_CONV_CAPS_CONFIGS[config]
    size, num_in = geometry["grid_size"], geometry["num_in"]
    poses = keras.Input(shape=(size, size, num_in, 4, 4), name="poses")
    activations = keras.Input(shape=(size, size, num_in), name="activations")
    layer_class = (
        naive_em.NaiveEMConvCaps
        if impl == "naive"
        else keras_capsules.layers.EMConvCaps
    )
    out_poses, out_activations = layer_class(
        num_capsules=geometry["num_out"],
        kernel_size=3,
        strides=2,
        routing_iterations=routing_iterations,
        name="em_conv_caps",
    )([poses, activations])
    outputs = keras.layers.Concatenate()(
        [
            keras.layers.Flatten()(out_poses),
            keras.layers.Flatten()(out_activations),
        ]
    )
    return keras.Model([poses, activations], outputs)


def em_conv_caps_inputs(config, batch_size, rng):
    """Random `[poses, activations]` for `em_conv_caps_model(config, ...)`."""
    geometry = EM_CONV_CAPS_CONFIGS[config]
    size, num_in = geometry["grid_size"], geometry["num_in"]
    poses = rng.standard_normal((batch_size, size, size, num_in, 4, 4))
    activations = rng.uniform(size=(batch_size, size, size, num_in))
    return [poses.astype("float32"), activations.astype("float32")]


def _build_em_conv_caps(spec, rng):
    config, iterations = spec["config"], spec["routing_iterations"]
    model = em_conv_caps_model(config, iterations, "ours")
    if spec["impl"] == "naive":
        naive = em_conv_caps_model(config, iterations, "naive")
        naive_em.copy_weights(model, naive)
        model = naive
    model.compile(
        optimizer="adam",
        loss="mse",
        jit_compile=common.default_jit_compile(spec["jit"]),
    )
    batch_size = spec["batch_size"]
    x = em_conv_caps_inputs(config, batch_size, rng)
    y = rng.standard_normal((batch_size,) + tuple(model.output.shape[1:]))
    return model, x, y.astype("float32")


def _build_dense_caps(spec, rng):
    shape = DENSE_CAPS_SHAPE
    inputs = keras.Input(shape=(shape["num_in"], shape["dim_in"]))
    capsules = keras_capsules.layers.DenseCaps(
        num_capsules=shape["num_out"],
        capsule_dim=shape["dim"],
        routing_iterations=spec["routing_iterations"],
        name="dense_caps",
    )(inputs)
    lengths = keras_capsules.layers.Length()(capsules)
    model = keras.Model(inputs, lengths)
    model.compile(
        optimizer="adam",
        loss=keras_capsules.losses.MarginLoss(),
        jit_compile=common.default_jit_compile(spec["jit"]),
    )
    batch_size = spec["batch_size"]
    # Squashed primary capsules have lengths below 1.
    x = rng.uniform(-0.3, 0.3, (batch_size, shape["num_in"], shape["dim_in"]))
    y = one_hot(rng, batch_size, shape["num_out"])
    return model, x.astype("float32"), y


_BUILDERS = {
    "capsnet": _build_capsnet,
    "efficient_capsnet": _build_efficient_capsnet,
    "matrix_capsnet": _build_matrix_capsnet,
    "em_conv_caps": _build_em_conv_caps,
    "dense_caps": _build_dense_caps,
}


def build(spec, rng):
    """Builds and compiles the model of the point `spec`, with a batch.

    Returns `(model, x, y)`.
    """
    return _BUILDERS[spec["model"]](spec, rng)
