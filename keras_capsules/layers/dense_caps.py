"""The DenseCaps layer: fully connected capsules with dynamic routing."""

import keras
from keras import ops

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_positive_int
from keras_capsules.layers._fully_connected import check_capsule_list
from keras_capsules.layers._serialization import serialize_objects
from keras_capsules.ops.dynamic import dynamic_routing


@keras.saving.register_keras_serializable(package="keras_capsules")
class DenseCaps(keras.layers.Layer):
    """Fully connected capsule layer with routing-by-agreement.

    Every input capsule `u_i` predicts every output capsule `j` through its
    own transformation matrix, `u_hat[i, j] = W[i, j] u_i` (Eq. 2), and the
    predictions are combined by dynamic routing (Procedure 1,
    `keras_capsules.ops.dynamic_routing`): coupling coefficients, a weighted
    sum, a squash, and agreement updates. This is the paper's DigitCaps
    layer: 1152 8D capsules to 10 16D capsules with 3 routing iterations,
    i.e. a `(1152, 8, 10, 16)` kernel of 1,474,560 weights. The optional bias
    is the official one, initialised to 0.1 and added before the squash.

    Paper: [Dynamic Routing Between Capsules](
    https://arxiv.org/abs/1710.09829) (Sabour, Frosst & Hinton, 2017).

    Args:
        num_capsules: Positive integer, the number of output capsules.
        capsule_dim: Positive integer, the number of components of each
            output capsule.
        routing_iterations: Positive integer, the number of routing
            iterations. Defaults to `3`.
        use_bias: Boolean, whether to add a bias of shape `(num_capsules,
            capsule_dim)` before the squash. Defaults to `False`.
        leaky_routing: Boolean, whether to use the official leaky routing (an
            extra zero logit in the softmax). Defaults to `False`.
        stop_gradient: Boolean, whether to stop gradients through the
            agreement updates and the non-final routing iterations. Defaults
            to `False`.
        kernel_initializer: Initializer for the transformation matrices.
            Defaults to `None`, which means `TruncatedNormal(stddev=0.1)`, the
            official code's (docs/design/reference_notes.md).
        bias_initializer: Initializer for the bias. Defaults to `None`, which
            means `Constant(0.1)`.
        kernel_regularizer: Optional kernel regularizer. Defaults to `None`.
        bias_regularizer: Optional bias regularizer. Defaults to `None`.
        kernel_constraint: Optional kernel constraint. Defaults to `None`.
        bias_constraint: Optional bias constraint. Defaults to `None`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, num_in, dim_in)`.
        return_coupling: Boolean, whether to also return the coupling
            coefficients `c_ij` of the last routing iteration, as
            `keras_capsules.ops.dynamic_routing` gives them. They do not
            change the outputs. Defaults to `False`.

    Input shape:
        3D tensor `(batch, num_in, dim_in)` with `num_in` and `dim_in`
        defined.

    Output shape:
        3D tensor `(batch, num_capsules, capsule_dim)`. With
        `return_coupling=True`, a tuple `(outputs, coupling)` where
        `coupling` has shape `(batch, num_in, num_capsules)` and sums to 1
        over `num_capsules` (to less than 1 with leaky routing).

    Raises:
        ValueError: If a size argument or `routing_iterations` is not a
            positive integer, or if the input is not of rank 3 with defined
            `num_in` and `dim_in`.
        TypeError: If `use_bias`, `leaky_routing` or `stop_gradient` is not a
            boolean.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> inputs = np.random.rand(2, 1152, 8).astype("float32")
    >>> layer = keras_capsules.layers.DenseCaps(num_capsules=10, capsule_dim=16)
    >>> digits, coupling = layer(inputs, return_coupling=True)
    >>> tuple(digits.shape), tuple(coupling.shape)
    ((2, 10, 16), (2, 1152, 10))

    Reference:
    - [Official TensorFlow code](https://github.com/Sarasra/models/tree/
      master/research/capsules)
    """

    def __init__(
        self,
        num_capsules,
        capsule_dim,
        routing_iterations=3,
        use_bias=False,
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
        _, num_in, dim_in = input_shape
        self.kernel = self.add_weight(
            name="kernel",
            shape=(num_in, dim_in, self.num_capsules, self.capsule_dim),
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
        self.input_spec = keras.InputSpec(ndim=3, axes={-2: num_in, -1: dim_in})

    def call(self, inputs, return_coupling=False):
        votes = ops.einsum("bid,idjk->bijk", inputs, self.kernel)
        return dynamic_routing(
            votes,
            routing_iterations=self.routing_iterations,
            bias=self.bias,
            leaky_routing=self.leaky_routing,
            stop_gradient=self.stop_gradient,
            return_coupling=return_coupling,
        )

    def compute_output_shape(self, input_shape):
        input_shape = check_capsule_list(input_shape, type(self).__name__)
        return (input_shape[0], self.num_capsules, self.capsule_dim)

    def compute_output_spec(self, inputs, return_coupling=False):
        output_shape = self.compute_output_shape(inputs.shape)
        outputs = keras.KerasTensor(output_shape, dtype=self.compute_dtype)
        if not return_coupling:
            return outputs
        coupling_shape = tuple(inputs.shape[:2]) + (self.num_capsules,)
        return outputs, keras.KerasTensor(
            coupling_shape, dtype=self.compute_dtype
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_capsules": self.num_capsules,
                "capsule_dim": self.capsule_dim,
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
