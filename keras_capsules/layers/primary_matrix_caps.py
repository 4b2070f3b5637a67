"""The PrimaryMatrixCaps layer: a feature map read as matrix capsules."""

import keras
from keras import ops

from keras_capsules._validation import check_positive_int
from keras_capsules._validation import normalize_padding
from keras_capsules._validation import normalize_pair
from keras_capsules.layers._serialization import serialize_objects
from keras_capsules.ops._tiles import conv_output_size


@keras.saving.register_keras_serializable(package="keras_capsules")
class PrimaryMatrixCaps(keras.layers.Layer):
    """Primary matrix capsules: poses and activations from a convolution.

    The lowest matrix-capsule layer (Hinton et al. 2018, Section 5: the
    primary capsules, `B = 32` types on the `A = 32` channels of ReLU
    Conv1). At every output position, a convolution gives each of the
    `num_capsules` types a pose matrix of `pose_shape` (a linear map of the
    features) and an activation logit, squashed into `(0, 1)` by a sigmoid.
    With the default 1x1 kernel on `A` channels there are `A * B * 16 + B *
    16 + A * B + B` weights (17,952 for `A = B = 32`).

    The official code computes the activation as `sigmoid(logit - 1.0)`
    with no bias; here the activation bias is learned and starts at
    `-1.0`, the same function at initialisation. Its kernels start from
    `TruncatedNormal(stddev=0.5)` (poses) and `TruncatedNormal(stddev=3.0)`
    (activations): pass those initializers to reproduce the official start
    (the Glorot defaults: docs/design/reference_notes.md).

    Paper: [Matrix capsules with EM routing](
    https://openreview.net/forum?id=HJWLfGWRb) (Hinton et al., ICLR 2018).

    Args:
        num_capsules: Positive integer, the number of capsule types `B`.
        pose_shape: Tuple of 2 equal positive integers, the shape of each
            pose matrix. Defaults to `(4, 4)`.
        kernel_size: Positive integer or tuple of 2, the convolution
            window. Defaults to `1`.
        strides: Positive integer or tuple of 2. Defaults to `1`.
        padding: `"valid"` or `"same"`, case-insensitive. Defaults to
            `"valid"`.
        use_bias: Boolean, whether the pose convolution has a bias (the
            activation convolution always has one). Defaults to `True`.
        kernel_initializer: Initializer for the pose kernel. Defaults to
            `"glorot_uniform"`.
        activation_initializer: Initializer for the activation kernel.
            Defaults to `"glorot_uniform"`.
        bias_initializer: Initializer for the pose bias. Defaults to
            `"zeros"`.
        activation_bias_initializer: Initializer for the activation bias.
            Defaults to `None`, which means `Constant(-1.0)` (the official
            logit offset).
        kernel_regularizer: Regularizer of both kernels. Defaults to `None`.
        bias_regularizer: Regularizer of both biases. Defaults to `None`.
        kernel_constraint: Constraint of both kernels. Defaults to `None`.
        bias_constraint: Constraint of both biases. Defaults to `None`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Input shape:
        4D tensor `(batch, height, width, channels)` (`channels_last`)
        with a defined `channels` dimension.

    Output shape:
        A list `[poses, activations]`: poses of shape `(batch, out_height,
        out_width, num_capsules, pose_height, pose_width)` and activations
        of shape `(batch, out_height, out_width, num_capsules)`.

    Raises:
        ValueError: If a size argument is not positive, if `pose_shape` is
            not square, if `padding` is unknown, if the input is not of
            rank 4 with defined channels, or if `kernel_size` leaves no
            output positions.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> layer = keras_capsules.layers.PrimaryMatrixCaps(num_capsules=32)
    >>> poses, activations = layer(
    ...     np.random.rand(2, 12, 12, 32).astype("float32")
    ... )
    >>> tuple(poses.shape), tuple(activations.shape)
    ((2, 12, 12, 32, 4, 4), (2, 12, 12, 32))

    Reference:
    - [Official TensorFlow code](https://github.com/google-research/
      google-research/tree/master/capsule_em)
    """

    def __init__(
        self,
        num_capsules,
        pose_shape=(4, 4),
        kernel_size=1,
        strides=1,
        padding="valid",
        use_bias=True,
        kernel_initializer="glorot_uniform",
        activation_initializer="glorot_uniform",
        bias_initializer="zeros",
        activation_bias_initializer=None,
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_capsules = check_positive_int(num_capsules, "num_capsules")
        self.pose_shape = _check_pose_shape(pose_shape)
        self.kernel_size = normalize_pair(kernel_size, "kernel_size")
        self.strides = normalize_pair(strides, "strides")
        self.padding = normalize_padding(padding)
        self.use_bias = bool(use_bias)
        if activation_bias_initializer is None:
            activation_bias_initializer = keras.initializers.Constant(-1.0)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.activation_initializer = keras.initializers.get(
            activation_initializer
        )
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.activation_bias_initializer = keras.initializers.get(
            activation_bias_initializer
        )
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)

    def build(self, input_shape):
        self.compute_output_shape(input_shape)
        channels = input_shape[-1]
        pose_size = self.pose_shape[0] * self.pose_shape[1]
        self.pose_kernel = self.add_weight(
            name="pose_kernel",
            shape=self.kernel_size + (channels, self.num_capsules * pose_size),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        if self.use_bias:
            self.pose_bias = self.add_weight(
                name="pose_bias",
                shape=(self.num_capsules * pose_size,),
                initializer=self.bias_initializer,
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
            )
        else:
            self.pose_bias = None
        self.activation_kernel = self.add_weight(
            name="activation_kernel",
            shape=self.kernel_size + (channels, self.num_capsules),
            initializer=self.activation_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.activation_bias = self.add_weight(
            name="activation_bias",
            shape=(self.num_capsules,),
            initializer=self.activation_bias_initializer,
            regularizer=self.bias_regularizer,
            constraint=self.bias_constraint,
        )
        self.input_spec = keras.InputSpec(ndim=4, axes={-1: channels})

    def call(self, inputs):
        # One convolution for both heads, as in the official code.
        kernel = ops.concatenate(
            [self.pose_kernel, self.activation_kernel], axis=-1
        )
        outputs = ops.conv(
            inputs,
            kernel,
            strides=self.strides,
            padding=self.padding,
            data_format="channels_last",
        )
        pose_size = self.pose_shape[0] * self.pose_shape[1]
        split = self.num_capsules * pose_size
        poses = outputs[..., :split]
        logits = outputs[..., split:] + self.activation_bias
        if self.pose_bias is not None:
            poses = poses + self.pose_bias
        out_h, out_w = poses.shape[1], poses.shape[2]
        poses = ops.reshape(
            poses, (-1, out_h, out_w, self.num_capsules) + self.pose_shape
        )
        return [poses, ops.sigmoid(logits)]

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) != 4 or input_shape[-1] is None:
            raise ValueError(
                "PrimaryMatrixCaps expects a 4D input (batch, height, "
                "width, channels) with a defined channels dimension. "
                f"Received: input_shape={input_shape}"
            )
        out = conv_output_size(
            input_shape[1:3],
            self.kernel_size,
            self.strides,
            self.padding,
            "PrimaryMatrixCaps",
        )
        batch = input_shape[0]
        return [
            (batch, out[0], out[1], self.num_capsules) + self.pose_shape,
            (batch, out[0], out[1], self.num_capsules),
        ]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_capsules": self.num_capsules,
                "pose_shape": self.pose_shape,
                "kernel_size": self.kernel_size,
                "strides": self.strides,
                "padding": self.padding,
                "use_bias": self.use_bias,
                **serialize_objects(
                    self,
                    "kernel_initializer",
                    "activation_initializer",
                    "bias_initializer",
                    "activation_bias_initializer",
                    "kernel_regularizer",
                    "bias_regularizer",
                    "kernel_constraint",
                    "bias_constraint",
                ),
            }
        )
        return config


def _check_pose_shape(pose_shape):
    if (
        not isinstance(pose_shape, (tuple, list))
        or len(pose_shape) != 2
        or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 1
            for v in pose_shape
        )
        or pose_shape[0] != pose_shape[1]
    ):
        raise ValueError(
            "Argument pose_shape must be a tuple of 2 equal positive "
            "integers, such as (4, 4). "
            f"Received: pose_shape={pose_shape}"
        )
    return (int(pose_shape[0]), int(pose_shape[1]))
