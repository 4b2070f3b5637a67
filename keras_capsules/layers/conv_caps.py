"""The ConvCaps layer: convolutional capsules with dynamic routing."""

import keras
from keras import ops

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import normalize_padding
from keras_capsules._validation import normalize_pair
from keras_capsules.layers._serialization import serialize_objects
from keras_capsules.ops._tiles import conv_output_size
from keras_capsules.ops.dynamic import dynamic_routing


@keras.saving.register_keras_serializable(package="keras_capsules")
class ConvCaps(keras.layers.Layer):
    """Convolutional capsule layer with routing over input capsule types.

    The "slim" convolutional capsule of the official code
    (`conv_slim_capsule`). One convolution kernel `(kernel_height,
    kernel_width, dim_in, num_capsules * capsule_dim)`, shared by the
    `caps_in` input capsule types, is applied to each type separately,
    giving every output position a vote `(num_capsules, capsule_dim)` per
    input type. Dynamic routing (Procedure 1,
    `keras_capsules.ops.dynamic_routing`) then runs at each output position
    over the input types, with a bias added before the squash.

    Paper: [Dynamic Routing Between Capsules](
    https://arxiv.org/abs/1710.09829) (Sabour, Frosst & Hinton, 2017).

    Args:
        num_capsules: Positive integer, the number of output capsule types.
        capsule_dim: Positive integer, the components of each output capsule.
        kernel_size: Positive integer or tuple of 2, the convolution window.
        strides: Positive integer or tuple of 2. Defaults to `1`.
        padding: `"valid"` or `"same"` (case-insensitive). Defaults to
            `"valid"`.
        routing_iterations: Positive integer. Defaults to `3`.
        use_bias: Boolean, whether to add the bias before the squash.
            Defaults to `True`, as in the official code.
        leaky_routing: Boolean, whether to use the official leaky routing
            (an extra zero logit in the softmax). Defaults to `False`.
        stop_gradient: Boolean, whether to stop gradients through the
            agreement updates and non-final iterations. Defaults to `False`.
        kernel_initializer: Initializer for the kernel. Defaults to `None`,
            which means `TruncatedNormal(stddev=0.1)`, the official init.
        bias_initializer: Initializer for the bias. Defaults to `None`,
            which means `Constant(0.1)`, the official init.
        kernel_regularizer: Optional kernel regularizer. Defaults to `None`.
        bias_regularizer: Optional bias regularizer. Defaults to `None`.
        kernel_constraint: Optional kernel constraint. Defaults to `None`.
        bias_constraint: Optional bias constraint. Defaults to `None`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, height, width, caps_in, dim_in)`.
        return_coupling: Boolean, whether to also return the coupling
            coefficients `c_ij` of the last routing iteration at every
            output position. Defaults to `False`.

    Input shape:
        5D tensor `(batch, height, width, caps_in, dim_in)` with `caps_in`
        and `dim_in` defined.

    Output shape:
        5D tensor `(batch, out_height, out_width, num_capsules,
        capsule_dim)`. With `return_coupling=True`, a tuple `(outputs,
        coupling)` where `coupling` has shape `(batch, out_height,
        out_width, caps_in, num_capsules)` and sums to 1 over
        `num_capsules` (to less than 1 with leaky routing).

    Raises:
        ValueError: If a size argument or `routing_iterations` is not a
            positive integer, if `padding` is unknown, if the input is not
            of rank 5 with defined `caps_in` and `dim_in`, or if
            `kernel_size` leaves no output positions on the input.
        TypeError: If `use_bias`, `leaky_routing` or `stop_gradient` is
            not a boolean.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> layer = keras_capsules.layers.ConvCaps(4, 8, kernel_size=3, strides=2)
    >>> capsules = layer(np.random.rand(2, 9, 9, 6, 4).astype("float32"))
    >>> tuple(capsules.shape)
    (2, 4, 4, 4, 8)

    Reference:
    - [Official TensorFlow code](https://github.com/Sarasra/models/tree/
      master/research/capsules)
    """

    def __init__(
        self,
        num_capsules,
        capsule_dim,
        kernel_size,
        strides=1,
        padding="valid",
        routing_iterations=3,
        use_bias=True,
        leaky_routing=False,
        stop_gradient=False,
        kernel_initializer=None,
        bias_initializer=None,
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
        self.routing_iterations = check_positive_int(
            routing_iterations, "routing_iterations"
        )
        self.use_bias = check_bool(use_bias, "use_bias")
        self.leaky_routing = check_bool(leaky_routing, "leaky_routing")
        self.stop_gradient = check_bool(stop_gradient, "stop_gradient")
        if kernel_initializer is None:
            # A fresh instance per layer: an unseeded initializer draws a
            # fixed seed once, so a shared default would repeat its values.
            kernel_initializer = keras.initializers.TruncatedNormal(stddev=0.1)
        if bias_initializer is None:
            bias_initializer = keras.initializers.Constant(0.1)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)

    def build(self, input_shape):
        self.compute_output_shape(input_shape)
        caps_in, dim_in = input_shape[-2:]
        self.kernel = self.add_weight(
            name="kernel",
            shape=self.kernel_size
            + (dim_in, self.num_capsules * self.capsule_dim),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias",
                shape=(self.num_capsules, self.capsule_dim),
                initializer=self.bias_initializer,
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
            )
        else:
            self.bias = None
        self.input_spec = keras.InputSpec(
            ndim=5, axes={-2: caps_in, -1: dim_in}
        )

    def call(self, inputs, return_coupling=False):
        caps_in, dim_in = inputs.shape[-2:]
        height, width = _spatial_dims(inputs)
        # Folding the input capsule types into the batch lets one shared
        # kernel see each type separately, as the official code does.
        per_type = ops.transpose(inputs, (0, 3, 1, 2, 4))
        per_type = ops.reshape(per_type, (-1, height, width, dim_in))
        votes = ops.conv(
            per_type,
            self.kernel,
            strides=self.strides,
            padding=self.padding,
            data_format="channels_last",
        )
        out_height, out_width = _spatial_dims(votes)
        votes = ops.reshape(
            votes,
            (
                -1,
                caps_in,
                out_height,
                out_width,
                self.num_capsules,
                self.capsule_dim,
            ),
        )
        votes = ops.transpose(votes, (0, 2, 3, 1, 4, 5))
        return dynamic_routing(
            votes,
            routing_iterations=self.routing_iterations,
            bias=self.bias,
            leaky_routing=self.leaky_routing,
            stop_gradient=self.stop_gradient,
            return_coupling=return_coupling,
        )

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) != 5 or None in input_shape[-2:]:
            raise ValueError(
                "Expected input of rank 5 (batch, height, width, caps_in, "
                f"dim_in) with caps_in and dim_in defined for "
                f"{type(self).__name__}. Received: input_shape={input_shape}"
            )
        out_height, out_width = conv_output_size(
            input_shape[1:3],
            self.kernel_size,
            self.strides,
            self.padding,
            type(self).__name__,
        )
        return (
            input_shape[0],
            out_height,
            out_width,
            self.num_capsules,
            self.capsule_dim,
        )

    def compute_output_spec(self, inputs, return_coupling=False):
        output_shape = self.compute_output_shape(inputs.shape)
        outputs = keras.KerasTensor(output_shape, dtype=self.compute_dtype)
        if not return_coupling:
            return outputs
        caps_in = inputs.shape[3]
        coupling_shape = output_shape[:3] + (caps_in, self.num_capsules)
        return outputs, keras.KerasTensor(
            coupling_shape, dtype=self.compute_dtype
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_capsules": self.num_capsules,
                "capsule_dim": self.capsule_dim,
                "kernel_size": self.kernel_size,
                "strides": self.strides,
                "padding": self.padding,
                "routing_iterations": self.routing_iterations,
                "use_bias": self.use_bias,
                "leaky_routing": self.leaky_routing,
                "stop_gradient": self.stop_gradient,
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


def _spatial_dims(x):
    # Static sizes where known keep shapes static under jit; a dynamic
    # height or width falls back to the runtime shape.
    static = x.shape[1:3]
    dynamic = ops.shape(x)
    return tuple(
        size if size is not None else dynamic[axis]
        for axis, size in zip((1, 2), static)
    )
