"""The PrimaryCaps layer: a convolution read as a grid of capsules."""

import keras

from keras_capsules._validation import check_positive_int
from keras_capsules._validation import normalize_padding
from keras_capsules._validation import normalize_pair
from keras_capsules.layers._feature_maps import check_feature_map
from keras_capsules.layers._feature_maps import to_capsules
from keras_capsules.layers._serialization import serialize_objects
from keras_capsules.ops._tiles import conv_output_size
from keras_capsules.ops.conv import conv2d


@keras.saving.register_keras_serializable(package="keras_capsules")
class PrimaryCaps(keras.layers.Layer):
    """Convolutional capsules: a Conv2D whose channels are squashed vectors.

    The lowest capsule layer of CapsNet. One 2D convolution with
    `num_capsules * capsule_dim` filters runs over a feature map; at every
    output position its channels are split into `num_capsules` vectors of
    `capsule_dim` components, all positions and capsule types are flattened
    into one list of capsules, and each vector is squashed (Eq. 1) so its
    length lies in `[0, 1)`. There is no routing into this layer. In the
    paper, 32 capsule types of 8 dimensions with a 9x9 kernel and stride 2
    on the 20x20x256 output of Conv1 give 6 * 6 * 32 = 1152 capsules.

    Paper: [Dynamic Routing Between Capsules](
    https://arxiv.org/abs/1710.09829) (Sabour, Frosst & Hinton, 2017).

    Args:
        num_capsules: Positive integer, the number of capsule types per
            position (the paper's 32).
        capsule_dim: Positive integer, the number of components of each
            capsule (the paper's 8).
        kernel_size: Positive integer or tuple of 2 positive integers, the
            height and width of the convolution window.
        strides: Positive integer or tuple of 2 positive integers, the
            strides of the convolution. Defaults to `1`.
        padding: `"valid"` or `"same"` (case-insensitive). Defaults to
            `"valid"`.
        kernel_initializer: Initializer for the convolution kernel.
            Defaults to `"glorot_uniform"`.
        bias_initializer: Initializer for the bias. Defaults to `"zeros"`.
        kernel_regularizer: Optional regularizer for the kernel. Defaults to
            `None`.
        bias_regularizer: Optional regularizer for the bias. Defaults to
            `None`.
        kernel_constraint: Optional constraint for the kernel. Defaults to
            `None`.
        bias_constraint: Optional constraint for the bias. Defaults to
            `None`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Input shape:
        4D tensor `(batch, height, width, channels)` (`channels_last`).

    Output shape:
        3D tensor `(batch, out_height * out_width * num_capsules,
        capsule_dim)`. Capsules are ordered by row, then column, then
        capsule type.

    Raises:
        ValueError: If a size argument is not positive, if `padding` is
            unknown, if the input does not have rank 4 or has an undefined
            channels dimension, or if `kernel_size` leaves no output
            positions on the input.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> layer = keras_capsules.layers.PrimaryCaps(
    ...     num_capsules=32, capsule_dim=8, kernel_size=9, strides=2
    ... )
    >>> capsules = layer(np.random.rand(2, 20, 20, 256).astype("float32"))
    >>> tuple(capsules.shape)
    (2, 1152, 8)
    """

    def __init__(
        self,
        num_capsules,
        capsule_dim,
        kernel_size,
        strides=1,
        padding="valid",
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_capsules = check_positive_int(num_capsules, "num_capsules")
        self.capsule_dim = check_positive_int(capsule_dim, "capsule_dim")
        self.kernel_size = normalize_pair(kernel_size, "kernel_size")
        self.strides = normalize_pair(strides, "strides")
        self.padding = normalize_padding(padding)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)

    def build(self, input_shape):
        self.compute_output_shape(input_shape)
        channels = input_shape[-1]
        filters = self.num_capsules * self.capsule_dim
        self.kernel = self.add_weight(
            name="kernel",
            shape=self.kernel_size + (channels, filters),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = self.add_weight(
            name="bias",
            shape=(filters,),
            initializer=self.bias_initializer,
            regularizer=self.bias_regularizer,
            constraint=self.bias_constraint,
        )
        self.input_spec = keras.InputSpec(ndim=4, axes={-1: channels})

    def call(self, inputs):
        features = conv2d(
            inputs, self.kernel, strides=self.strides, padding=self.padding
        )
        return to_capsules(features + self.bias, self.capsule_dim)

    def compute_output_shape(self, input_shape):
        input_shape = check_feature_map(input_shape, type(self).__name__)
        out_height, out_width = conv_output_size(
            input_shape[1:3],
            self.kernel_size,
            self.strides,
            self.padding,
            type(self).__name__,
        )
        if out_height is None or out_width is None:
            num_out = None
        else:
            num_out = out_height * out_width * self.num_capsules
        return (input_shape[0], num_out, self.capsule_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_capsules": self.num_capsules,
                "capsule_dim": self.capsule_dim,
                "kernel_size": self.kernel_size,
                "strides": self.strides,
                "padding": self.padding,
                **serialize_objects(
                    self,
                    "kernel_initializer",
                    "bias_initializer",
                    "kernel_regularizer",
                    "bias_regularizer",
                    "kernel_constraint",
                    "bias_constraint",
                ),
            }
        )
        return config
