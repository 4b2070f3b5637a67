"""The EMConvCaps layer: convolutional matrix capsules with EM routing."""

import keras

from keras_capsules._validation import check_matrix_capsules_shape
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import normalize_padding
from keras_capsules._validation import normalize_pair
from keras_capsules.layers._em_routing import EMRoutingOptions
from keras_capsules.layers._serialization import serialize_objects
from keras_capsules.ops._tiles import tiling_sizes
from keras_capsules.ops.em import _capsules as em_capsules
from keras_capsules.ops.em import _core as em_core

_DEFAULTS = em_core.DEFAULTS


@keras.saving.register_keras_serializable(package="keras_capsules")
class EMConvCaps(EMRoutingOptions, keras.layers.Layer):
    """Convolutional matrix capsules with EM routing.

    ConvCaps1 and ConvCaps2 of the paper (Hinton et al. 2018, Section 5).
    Each output position sees a `kernel_size` window of the input capsule
    grid. Every input capsule in the window votes for every output capsule
    type by multiplying its pose matrix `M` by a learned transformation
    matrix, `V = M W`, with one `W` per (kernel row, kernel column, input
    type, output type), shared over all positions (`kernel_h * kernel_w *
    B * C * 16` weights for 4x4 poses: 147,456 for the paper's 3x3 kernel
    and `B = C = 32`). The votes are one batched `keras.ops.matmul` over
    the kernel tiles of `keras_capsules.ops.extract_capsule_patches`; the
    weights are never tiled over the batch. The votes are then routed as
    `keras_capsules.ops.em_conv_routing` routes them; by default with the
    official per-type normalisation over overlapping windows
    (`routing_normalization="official"`); each window on its own and the
    all-parents normalisation of Gritzman (2019) are options. On
    TensorFlow and JAX the routing runs in the layout the matmul writes
    (children first), which is faster there and gives the same values.
    The routing defaults are those of the op, the setting that learned
    fastest (docs/em_routing.md); the official code's setting,
    `routing_iterations=3, final_lambda=0.01, min_variance=5e-4,
    epsilon=1e-7, routing_mode="official",
    routing_normalization="reference"` (`ops.OFFICIAL_EM_OPTIONS`),
    reproduces its convolutional routing to float precision.
    A model built from this layer trains several times faster with
    `compile(jit_compile=True)` on TensorFlow (docs/performance.md).
    Each output type has its own `beta_v` and `beta_a`, shared over
    positions, for `2 * C` more weights.

    On the paper's 32x32 smallNORB network the capsule grids go 14 -> 6
    (ConvCaps1, `kernel_size=3`, `strides=2`) -> 4 (ConvCaps2,
    `kernel_size=3`, `strides=1`).

    Paper: [Matrix capsules with EM routing](
    https://openreview.net/forum?id=HJWLfGWRb) (Hinton, Sabour & Frosst,
    ICLR 2018).

    Args:
        num_capsules: Positive integer, the number of output capsule types
            `C`.
        kernel_size: Positive integer or tuple of 2 positive integers, the
            window of input capsules seen by each output position.
            Defaults to `3`.
        strides: Positive integer or tuple of 2 positive integers.
            Defaults to `1`.
        routing_iterations: Positive integer, the number of EM iterations.
            Defaults to `2` (the paper uses 3, which learned more slowly).
        padding: `"valid"` or `"same"` (case-insensitive); `"same"` pads
            with inactive capsules. Defaults to `"valid"`.
        final_lambda: Positive float, the final inverse temperature of
            the routing. Defaults to `1e-3` (the official `final_beta` is
            0.01).
        min_variance: Positive float, the floor added to every variance.
            Defaults to `5e-4`.
        routing_mode: `"official"` or `"paper"`, the forms of the M-step
            (see `keras_capsules.ops.em_routing`). Defaults to `"paper"`
            (the official form, with its `5000 * beta_a` term, learned
            more slowly).
        routing_normalization: `"window"`, `"official"`,
            `"all_parents"` or `"reference"`: how the E-step normalises
            the assignments of a child that overlapping windows share (see
            `keras_capsules.ops.em_conv_routing`). Defaults to
            `"official"`, which learned fastest; `"window"` trains a step
            faster; `"reference"` has the official code's numerics.
        epsilon: Optional positive float added to every mass of the
            routing (and, with `"reference"`, to the sums of its E-step).
            Defaults to `None`, which means `keras.config.epsilon()`
            (1e-7, the official value).
        kernel_initializer: Initializer for the transformation matrices.
            Defaults to `None`, which means `TruncatedNormal(stddev=0.3)`
            (the official value).
        beta_v_initializer: Initializer for `beta_v`. Defaults to `None`,
            which means zeros (the official value is 0.5).
        beta_a_initializer: Initializer for `beta_a`. Defaults to `None`,
            which means zeros (the official value is 0.5).
        kernel_regularizer: Optional regularizer for the transformation
            matrices (the official code uses an L2 weight decay of 2e-7).
            Defaults to `None`.
        kernel_constraint: Optional constraint for the transformation
            matrices. Defaults to `None`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: A list `[poses, activations]` of matrix capsules.

    Input shape:
        A list of two tensors: poses `(batch, height, width, B,
        pose_size, pose_size)` and activations `(batch, height, width, B)`,
        with static `height`, `width`, `B` and pose shape.

    Output shape:
        A list `[poses, activations]`: poses of shape `(batch, out_height,
        out_width, num_capsules, pose_size, pose_size)` and activations of
        shape `(batch, out_height, out_width, num_capsules)`.

    Raises:
        ValueError: If an argument is out of range, if the input is not a
            list of poses and activations of matching shapes with square
            poses, or if `kernel_size` leaves no output positions.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> poses = np.random.rand(2, 6, 6, 8, 4, 4).astype("float32")
    >>> activations = np.random.rand(2, 6, 6, 8).astype("float32")
    >>> layer = keras_capsules.layers.EMConvCaps(
    ...     num_capsules=8, kernel_size=3, strides=2
    ... )
    >>> out_poses, out_activations = layer([poses, activations])
    >>> tuple(out_poses.shape), tuple(out_activations.shape)
    ((2, 2, 2, 8, 4, 4), (2, 2, 2, 8))

    Reference:
    - [Official TensorFlow code](https://github.com/google-research/
      google-research/tree/master/capsule_em)
    - [Gritzman, Avoiding implementation pitfalls of "Matrix capsules with
      EM routing"](https://arxiv.org/abs/1907.00652) (2019)
    """

    def __init__(
        self,
        num_capsules,
        kernel_size=3,
        strides=1,
        routing_iterations=_DEFAULTS.iterations,
        padding="valid",
        final_lambda=_DEFAULTS.final_lambda,
        min_variance=_DEFAULTS.min_variance,
        routing_mode=_DEFAULTS.mode,
        routing_normalization=em_core.DEFAULT_NORMALIZATION,
        epsilon=_DEFAULTS.epsilon,
        kernel_initializer=None,
        beta_v_initializer=None,
        beta_a_initializer=None,
        kernel_regularizer=None,
        kernel_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_capsules = check_positive_int(num_capsules, "num_capsules")
        self.kernel_size = normalize_pair(kernel_size, "kernel_size")
        self.strides = normalize_pair(strides, "strides")
        self.padding = normalize_padding(padding)
        self.keep_routing_options(
            routing_iterations,
            final_lambda,
            min_variance,
            routing_mode,
            epsilon,
        )
        self.routing_normalization = em_core.check_normalization(
            routing_normalization, "routing_normalization"
        )
        # Fresh instances per layer: an unseeded initializer draws its seed
        # once, so a shared default object would repeat its values.
        if kernel_initializer is None:
            kernel_initializer = keras.initializers.TruncatedNormal(stddev=0.3)
        if beta_v_initializer is None:
            beta_v_initializer = keras.initializers.Zeros()
        if beta_a_initializer is None:
            beta_a_initializer = keras.initializers.Zeros()
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.beta_v_initializer = keras.initializers.get(beta_v_initializer)
        self.beta_a_initializer = keras.initializers.get(beta_a_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)

    def build(self, input_shape):
        self.compute_output_shape(input_shape)
        pose_shape, _ = input_shape
        num_in, pose_size = pose_shape[3], pose_shape[4]
        self.kernel = self.add_weight(
            name="kernel",
            shape=self.kernel_size
            + (num_in, self.num_capsules, pose_size, pose_size),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.beta_v = self.add_weight(
            name="beta_v",
            shape=(self.num_capsules,),
            initializer=self.beta_v_initializer,
        )
        self.beta_a = self.add_weight(
            name="beta_a",
            shape=(self.num_capsules,),
            initializer=self.beta_a_initializer,
        )
        self.input_spec = [
            keras.InputSpec(ndim=6, axes={3: num_in}),
            keras.InputSpec(ndim=4, axes={3: num_in}),
        ]

    def call(self, inputs):
        poses, activations = inputs
        return list(
            em_capsules.conv_capsules(
                poses,
                activations,
                self.kernel,
                self.beta_v,
                self.beta_a,
                self.kernel_size,
                self.strides,
                self.padding,
                self.routing_normalization,
                self.routing_options,
            )
        )

    def compute_output_shape(self, input_shape):
        pose_shape, _ = check_matrix_capsules_shape(input_shape, "EMConvCaps")
        batch, height, width, _, pose_size, _ = pose_shape
        (out_h, out_w), _ = tiling_sizes(
            (height, width), self.kernel_size, self.strides, self.padding
        )
        return [
            (batch, out_h, out_w, self.num_capsules, pose_size, pose_size),
            (batch, out_h, out_w, self.num_capsules),
        ]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_capsules": self.num_capsules,
                "kernel_size": self.kernel_size,
                "strides": self.strides,
                "routing_iterations": self.routing_iterations,
                "padding": self.padding,
                "final_lambda": self.final_lambda,
                "min_variance": self.min_variance,
                "routing_mode": self.routing_mode,
                "routing_normalization": self.routing_normalization,
                "epsilon": self.epsilon,
                **serialize_objects(
                    self,
                    "kernel_initializer",
                    "beta_v_initializer",
                    "beta_a_initializer",
                    "kernel_regularizer",
                    "kernel_constraint",
                ),
            }
        )
        return config
