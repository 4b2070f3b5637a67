"""The DepthwisePrimaryCaps layer: a depthwise convolution read as
capsules."""

import keras

from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import normalize_padding
from keras_capsules._validation import normalize_pair
from keras_capsules.layers._feature_maps import check_feature_map
from keras_capsules.layers._feature_maps import to_capsules
from keras_capsules.layers._serialization import serialize_objects
from keras_capsules.ops._tiles import conv_output_size
from keras_capsules.ops.conv import depthwise_conv2d
from keras_capsules.ops.squash import FORMS


@keras.saving.register_keras_serializable(package="keras_capsules")
class DepthwisePrimaryCaps(keras.layers.Layer):
    """Primary capsules from a depthwise convolution, as in Efficient-CapsNet.

    Each input channel is filtered by its own `kernel_size` window
    (`depth_multiplier` filters per channel, with a bias), there is no
    pointwise mixing of the channels, and at every output position the
    `channels * depth_multiplier` outputs are split into consecutive
    vectors of `capsule_dim` components, which are squashed. In
    Efficient-CapsNet the window covers the whole 9x9x128 feature map, so
    the layer gives 16 8D capsules from 10,496 weights.

    Unlike in `PrimaryCaps`, the number of capsules follows from the
    input's channels. The authors' code uses a plain depthwise convolution;
    the paper calls it depthwise separable, but no pointwise convolution
    follows it there.

    Paper: [Efficient-CapsNet: capsule network with self-attention
    routing](https://doi.org/10.1038/s41598-021-93977-0) (Mazzia,
    Salvetti & Chiaberge, 2021).

    Args:
        capsule_dim: Positive integer, the number of components of each
            capsule; it must divide `channels * depth_multiplier`.
        kernel_size: Positive integer or tuple of 2 positive integers, the
            height and width of the convolution window.
        strides: Positive integer or tuple of 2 positive integers, the
            strides of the convolution. Defaults to `1`.
        padding: `"valid"` or `"same"` (case-insensitive). Defaults to
            `"valid"`.
        depth_multiplier: Positive integer, the filters per input channel.
            Defaults to `1`.
        squash_form: `"exponential"` (Efficient-CapsNet) or `"rational"`
            (Sabour et al.). Defaults to `"exponential"`.
        kernel_initializer: Initializer for the depthwise kernel. Defaults
            to `"glorot_uniform"`.
        bias_initializer: Initializer for the bias. Defaults to `"zeros"`.
        kernel_regularizer: Optional kernel regularizer. Defaults to `None`.
        bias_regularizer: Optional bias regularizer. Defaults to `None`.
        kernel_constraint: Optional kernel constraint. Defaults to `None`.
        bias_constraint: Optional bias constraint. Defaults to `None`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Input shape:
        4D tensor `(batch, height, width, channels)` (`channels_last`).

    Output shape:
        3D tensor `(batch, out_height * out_width * channels *
        depth_multiplier / capsule_dim, capsule_dim)`. Capsules are ordered
        by row, then column, then channel group.

    Raises:
        ValueError: If a size argument is not positive, if `padding` or
            `squash_form` is unknown, if the input does not have rank 4 or
            has an undefined channels dimension, if `capsule_dim` does not
            divide `channels * depth_multiplier`, or if `kernel_size`
            leaves no output positions on the input.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> layer = keras_capsules.layers.DepthwisePrimaryCaps(
    ...     capsule_dim=8, kernel_size=9
    ... )
    >>> capsules = layer(np.random.rand(2, 9, 9, 128).astype("float32"))
    >>> tuple(capsules.shape)
    (2, 16, 8)

    Reference:
    - [The authors' TensorFlow code](
      https://github.com/EscVM/Efficient-CapsNet)
    """

    def __init__(
        self,
        capsule_dim,
        kernel_size,
        strides=1,
        padding="valid",
        depth_multiplier=1,
        squash_form="exponential",
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.capsule_dim = check_positive_int(capsule_dim, "capsule_dim")
        self.kernel_size = normalize_pair(kernel_size, "kernel_size")
        self.strides = normalize_pair(strides, "strides")
        self.padding = normalize_padding(padding)
        self.depth_multiplier = check_positive_int(
            depth_multiplier, "depth_multiplier"
        )
        self.squash_form = check_option(squash_form, "squash_form", FORMS)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)

    def build(self, input_shape):
        self.compute_output_shape(input_shape)
        channels = input_shape[-1]
        self.kernel = self.add_weight(
            name="kernel",
            shape=self.kernel_size + (channels, self.depth_multiplier),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = self.add_weight(
            name="bias",
            shape=(channels * self.depth_multiplier,),
            initializer=self.bias_initializer,
            regularizer=self.bias_regularizer,
            constraint=self.bias_constraint,
        )
        self.input_spec = keras.InputSpec(ndim=4, axes={-1: channels})

    def call(self, inputs):
        features = depthwise_conv2d(
            inputs, self.kernel, strides=self.strides, padding=self.padding
        )
        return to_capsules(
            features + self.bias,
            self.capsule_dim,
            squash_form=self.squash_form,
        )

    def compute_output_shape(self, input_shape):
        name = type(self).__name__
        input_shape = check_feature_map(input_shape, name)
        channels = input_shape[-1]
        filters = channels * self.depth_multiplier
        if filters % self.capsule_dim:
            raise ValueError(
                f"{name} splits the channels * depth_multiplier = {filters} "
                f"outputs of each position into capsules of capsule_dim="
                f"{self.capsule_dim} components, which must divide them. "
                f"Received: input_shape={input_shape}"
            )
        out_height, out_width = conv_output_size(
            input_shape[1:3], self.kernel_size, self.strides, self.padding, name
        )
        if out_height is None or out_width is None:
            num_out = None
        else:
            num_out = out_height * out_width * filters // self.capsule_dim
        return (input_shape[0], num_out, self.capsule_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "capsule_dim": self.capsule_dim,
                "kernel_size": self.kernel_size,
                "strides": self.strides,
                "padding": self.padding,
                "depth_multiplier": self.depth_multiplier,
                "squash_form": self.squash_form,
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
