"""The SelfAttentionCaps layer: fully connected capsules with
self-attention routing."""

import keras
from keras import ops

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_int
from keras_capsules.layers._fully_connected import check_built
from keras_capsules.layers._fully_connected import check_capsule_list
from keras_capsules.layers._serialization import serialize_objects
from keras_capsules.ops.self_attention import self_attention_routing
from keras_capsules.ops.squash import FORMS


@keras.saving.register_keras_serializable(package="keras_capsules")
class SelfAttentionCaps(keras.layers.Layer):
    """Fully connected capsule layer with self-attention routing.

    The class capsule layer of Efficient-CapsNet (`FCCaps` in the authors'
    code). Every input capsule `u_i` predicts every output capsule `j`
    through its own matrix, `u[i, j] = u_i W[i, j]`, and the votes are
    routed in one pass by `keras_capsules.ops.self_attention_routing`: the
    agreement of each vote with the sum of the votes for its parent gives
    coupling coefficients by a softmax over the parents, a learned prior is
    added to them, and the weighted sum of the votes is squashed. In
    Efficient-CapsNet, 16 8D primary capsules go to 10 16D class capsules: a
    `(16, 10, 8, 16)` kernel of 20,480 weights and a `(16, 10)` prior.

    The kernel's default initializer is the authors' `"he_normal"`. Its
    axes are ordered `(num_in, num_capsules, dim_in, capsule_dim)`, so
    that Keras reads the fan-in as `num_in * num_capsules * dim_in`, as it
    does for the authors' kernel (1280 in Efficient-CapsNet). The prior
    starts at zero.

    Paper: [Efficient-CapsNet: capsule network with self-attention
    routing](https://doi.org/10.1038/s41598-021-93977-0) (Mazzia,
    Salvetti & Chiaberge, 2021).

    Args:
        num_capsules: Positive integer, the number of output capsules.
        capsule_dim: Positive integer, the number of components of each
            output capsule.
        use_prior: Boolean, whether to learn the prior added to the
            coupling coefficients. Defaults to `True`.
        squash_form: `"exponential"` (the paper) or `"rational"` (Sabour
            et al.): the squash of the output capsules. Defaults to
            `"exponential"`.
        kernel_initializer: Initializer for the transformation matrices.
            Defaults to `"he_normal"`.
        prior_initializer: Initializer for the prior. Defaults to
            `"zeros"`.
        kernel_regularizer: Optional kernel regularizer. Defaults to `None`.
        prior_regularizer: Optional prior regularizer. Defaults to `None`.
        kernel_constraint: Optional kernel constraint. Defaults to `None`.
        prior_constraint: Optional prior constraint. Defaults to `None`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Input shape:
        3D tensor `(batch, num_in, dim_in)` with `num_in` and `dim_in`
        defined.

    Output shape:
        3D tensor `(batch, num_capsules, capsule_dim)`.

    Raises:
        ValueError: If a size argument is not a positive integer, if
            `squash_form` is unknown, or if the input is not of rank 3
            with defined `num_in` and `dim_in`.
        TypeError: If `use_prior` is not a boolean.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> layer = keras_capsules.layers.SelfAttentionCaps(
    ...     num_capsules=10, capsule_dim=16
    ... )
    >>> digits = layer(np.random.rand(2, 16, 8).astype("float32"))
    >>> tuple(digits.shape)
    (2, 10, 16)

    Reference:
    - [The authors' TensorFlow code](
      https://github.com/EscVM/Efficient-CapsNet)
    """

    def __init__(
        self,
        num_capsules,
        capsule_dim,
        use_prior=True,
        squash_form="exponential",
        kernel_initializer="he_normal",
        prior_initializer="zeros",
        kernel_regularizer=None,
        prior_regularizer=None,
        kernel_constraint=None,
        prior_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_capsules = check_positive_int(num_capsules, "num_capsules")
        self.capsule_dim = check_positive_int(capsule_dim, "capsule_dim")
        self.use_prior = check_bool(use_prior, "use_prior")
        self.squash_form = check_option(squash_form, "squash_form", FORMS)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.prior_initializer = keras.initializers.get(prior_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.prior_regularizer = keras.regularizers.get(prior_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.prior_constraint = keras.constraints.get(prior_constraint)

    def build(self, input_shape):
        self.compute_output_shape(input_shape)
        _, num_in, dim_in = input_shape
        self.kernel = self.add_weight(
            name="kernel",
            shape=(num_in, self.num_capsules, dim_in, self.capsule_dim),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        if self.use_prior:
            self.prior = self.add_weight(
                name="prior",
                shape=(num_in, self.num_capsules),
                initializer=self.prior_initializer,
                regularizer=self.prior_regularizer,
                constraint=self.prior_constraint,
            )
        else:
            self.prior = None
        self.input_spec = keras.InputSpec(ndim=3, axes={-2: num_in, -1: dim_in})

    def call(self, inputs):
        return self_attention_routing(
            self.votes(inputs), prior=self.prior, squash_form=self.squash_form
        )

    def votes(self, inputs):
        """Returns the votes that `call` routes, `u[i, j] = u_i W[i, j]`.

        Routing them with the layer's options reproduces the layer's
        output, and `return_coupling=True` also gives the coefficients:
        `keras_capsules.ops.self_attention_routing(layer.votes(inputs),
        prior=layer.prior, squash_form=layer.squash_form,
        return_coupling=True)`.

        Args:
            inputs: Tensor of shape `(batch, num_in, dim_in)`, as in `call`.

        Returns:
            A tensor of shape `(batch, num_in, num_capsules, capsule_dim)`.

        Raises:
            ValueError: If the layer is not built yet.
        """
        check_built(self)
        return ops.einsum("bid,ijde->bije", inputs, self.kernel)

    def compute_output_shape(self, input_shape):
        input_shape = check_capsule_list(input_shape, type(self).__name__)
        return (input_shape[0], self.num_capsules, self.capsule_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_capsules": self.num_capsules,
                "capsule_dim": self.capsule_dim,
                "use_prior": self.use_prior,
                "squash_form": self.squash_form,
                **serialize_objects(
                    self,
                    "kernel_initializer",
                    "prior_initializer",
                    "kernel_regularizer",
                    "prior_regularizer",
                    "kernel_constraint",
                    "prior_constraint",
                ),
            }
        )
        return config
