"""The EMConvCaps layer: convolutional matrix capsules with EM routing."""

import keras
from keras import ops

from keras_capsules._validation import check_matrix_capsules_shape
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import normalize_padding
from keras_capsules._validation import normalize_pair
from keras_capsules.layers._em_routing import EMRoutingOptions
from keras_capsules.layers._serialization import serialize_objects
from keras_capsules.ops._tiles import extract_tiles
from keras_capsules.ops._tiles import tiling
from keras_capsules.ops._tiles import tiling_sizes
from keras_capsules.ops.em import _core as em_core
from keras_capsules.ops.em._vote_layouts import vote_layout

_DEFAULTS = em_core.DEFAULTS


@keras.saving.register_keras_serializable(package="keras_capsules")
class EMConvCaps(EMRoutingOptions, keras.layers.Layer):
    """Convolutional matrix capsules with EM routing.

    ConvCaps1 and ConvCaps2 of the paper (Hinton et al. 2018, Section 5).
    Every input capsule in the `kernel_size` window of an output position
    votes for every output type with `V = M W`: its pose `M` times a 4x4 `W`
    per (kernel row, kernel column, input type, output type), shared over
    positions (`kernel_h * kernel_w * B * C * 16` weights). The votes are
    routed as `keras_capsules.ops.em_conv_routing` routes them, with its
    defaults (docs/design/em_routing_defaults.md); each output type has its
    own `beta_v` and `beta_a`. `**ops.OFFICIAL_EM_OPTIONS` reproduces the
    official convolutional routing to float precision. Compile a model of
    your own with `jit_compile=True` (docs/performance.md).

    Paper: [Matrix capsules with EM routing](
    https://openreview.net/forum?id=HJWLfGWRb) (Hinton et al., ICLR 2018).

    Args:
        num_capsules: Positive integer, the number of output capsule types `C`.
        kernel_size: Positive integer or tuple of 2. Defaults to `3`.
        strides: Positive integer or tuple of 2. Defaults to `1`.
        routing_iterations: Positive integer. Defaults to `2` (the paper: 3).
        padding: `"valid"` or `"same"` (case-insensitive); `"same"` pads with
            inactive capsules. Defaults to `"valid"`.
        final_lambda: Positive float, the final inverse temperature of the
            routing. Defaults to `1e-3` (the official `final_beta` is 0.01).
        min_variance: Positive float, the variance floor. Defaults to `5e-4`.
        routing_mode: `"paper"` or `"official"`, the M-step forms (see
            `em_routing`). Defaults to `"paper"`.
        routing_normalization: `"official"`, `"window"`, `"all_parents"` or
            `"reference"` (the official numerics): how the E-step normalises
            a shared child (see `em_conv_routing`). Defaults to `"official"`.
        epsilon: Optional positive float added to every mass. Defaults to
            `None`, which means `keras.config.epsilon()`, 1e-7 (official).
        kernel_initializer: Initializer for the transforms `W`. Defaults to
            `None`, which means `TruncatedNormal(stddev=0.3)` (official).
        beta_v_initializer: Initializer for `beta_v`. Defaults to `None`,
            which means zeros (official: 0.5).
        beta_a_initializer: Initializer for `beta_a`. Defaults to `None`,
            which means zeros (official: 0.5).
        kernel_regularizer: Optional regularizer for `W` (the official code
            uses an L2 weight decay of 2e-7). Defaults to `None`.
        kernel_constraint: Optional constraint for `W`. Defaults to `None`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: A list `[poses, activations]` of matrix capsules.

    Input shape:
        A list of two tensors: poses `(batch, height, width, B, pose_size,
        pose_size)` and activations `(batch, height, width, B)`, with static
        `height`, `width`, `B` and pose shape.

    Output shape:
        A list `[poses, activations]` of shapes `(batch, out_height,
        out_width, num_capsules, pose_size, pose_size)` and `(batch,
        out_height, out_width, num_capsules)`.

    Raises:
        ValueError: If an argument is out of range, if the input is not a
            list of poses and activations of matching shapes with square
            poses, or if `kernel_size` leaves no output positions.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> poses = np.random.rand(2, 6, 6, 8, 4, 4).astype("float32")
    >>> activations = np.random.rand(2, 6, 6, 8).astype("float32")
    >>> layer = keras_capsules.layers.EMConvCaps(8, kernel_size=3, strides=2)
    >>> out_poses, out_activations = layer([poses, activations])
    >>> tuple(out_poses.shape), tuple(out_activations.shape)
    ((2, 2, 2, 8, 4, 4), (2, 2, 2, 8))

    Reference:
    - [Official TensorFlow code](https://github.com/google-research/
      google-research/tree/master/capsule_em)
    """

    def __init__(
        self,
        num_capsules,
        kernel_size=3,
        strides=1,
        routing_iterations=_DEFAULTS.routing_iterations,
        padding="valid",
        final_lambda=_DEFAULTS.final_lambda,
        min_variance=_DEFAULTS.min_variance,
        routing_mode=_DEFAULTS.routing_mode,
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
            routing_normalization
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
        _, height, width, num_in, pose_size, _ = poses.shape
        windows = tiling(
            (height, width), self.kernel_size, self.strides, self.padding
        )
        # V = M W for every capsule of every window and every output type,
        # written in the axis order this backend routes fastest.
        layout = vote_layout(windows, num_in)
        votes = layout.votes(extract_tiles(poses, windows), self.kernel)
        poses, activations = em_core.route_conv(
            votes=votes,
            activations=activations,
            beta_v=self.beta_v,
            beta_a=self.beta_a,
            layout=layout,
            routing_normalization=self.routing_normalization,
            options=self.routing_options,
        )
        out_h, out_w = windows.out_size
        shape = (-1, out_h, out_w, self.num_capsules, pose_size, pose_size)
        return [ops.reshape(poses, shape), activations]

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
