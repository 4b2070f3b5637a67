"""The part capsule encoder of Stacked Capsule Autoencoders."""

import keras
from keras import ops

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_int_tuple
from keras_capsules._validation import check_non_negative_number
from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_int
from keras_capsules.layers._sonnet import linear_initializer
from keras_capsules.ops.poses import geometric_transform

HEAD_LAYOUTS = ("official", "per_capsule")
_POSE_DIM = 6


@keras.saving.register_keras_serializable(package="keras_capsules")
class PartCapsuleEncoder(keras.layers.Layer):
    """Encodes an image into part capsules: poses, features, presences.

    The encoder of the part capsule autoencoder of Stacked Capsule
    Autoencoders, as the official code builds it for MNIST: a stack of
    ReLU convolutions (`"valid"` padding), a learned bias over the whole
    feature map, and a 1x1 convolution that gives, at every position,
    `num_capsules * (6 + num_features + 1)` values and `num_capsules`
    attention logits. Each capsule's values are averaged over the
    positions with the softmax of its attention logits over the positions
    (attention pooling), then split into

    - 6 pose parameters, turned into an affine transform by
      `keras_capsules.ops.geometric_transform` (its non-linearities
      included);
    - `num_features` special features (the template decoder colours its
      templates from them, and the object encoder reads them);
    - a presence logit, to which uniform noise in
      `[-noise_scale / 2, noise_scale / 2]` is added before the sigmoid.

    **Where the official code departs from the description.** The pooled
    values come out as `(num_values, num_capsules)` and are *reshaped*,
    not transposed, to `(num_capsules, num_values)`, so that one capsule's
    values are pooled with different capsules' attention maps.
    `head_layout="official"` reproduces this; `"per_capsule"` transposes,
    so that each capsule's values are pooled with its own attention (the
    same parameter count). The official code also adds the presence noise
    at evaluation time, not only in training: `noise_at_inference=True`
    (the default) does the same, `False` adds it only when
    `training=True`.

    Paper: [Stacked Capsule Autoencoders](https://arxiv.org/abs/1906.06818)
    (Kosiorek, Sabour, Teh & Hinton, NeurIPS 2019).

    Args:
        num_capsules: Positive int, the number of part capsules. Defaults
            to `40` (official MNIST).
        num_features: Positive int, the special features per capsule.
            Defaults to `16`.
        filters: Tuple of positive ints, the filters of each convolution.
            Defaults to `(128, 128, 128, 128)`.
        strides: Tuple of positive ints, one per convolution. Defaults to
            `(2, 2, 1, 1)`.
        kernel_size: Positive int, the kernel size of every convolution.
            Defaults to `3`.
        noise_scale: Non-negative float, the width of the uniform noise
            added to the presence logits. Defaults to `4.0`.
        noise_at_inference: Boolean, whether to add the noise outside
            training too. Defaults to `True` (the official code).
        similarity: Boolean, whether the poses are similarity transforms
            (no shear, one scale). Defaults to `False`.
        head_layout: `"official"` or `"per_capsule"` (see above). Defaults
            to `"official"`.
        seed: Optional int, the seed of the presence noise. Defaults to
            `None`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Input shape:
        `(batch, height, width, channels)` images.

    Output shape:
        A dict of tensors: `"poses"` `(batch, num_capsules, 6)` (the affine
        transforms `(a, b, tx, c, d, ty)`), `"features"`
        `(batch, num_capsules, num_features)`, `"presence"` and
        `"presence_logits"` `(batch, num_capsules)`.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> encoder = keras_capsules.layers.PartCapsuleEncoder()
    >>> parts = encoder(np.zeros((2, 40, 40, 1), "float32"))
    >>> tuple(parts["poses"].shape), tuple(parts["presence"].shape)
    ((2, 40, 6), (2, 40))

    Reference:
    - [The official TensorFlow code](
      https://github.com/akosiorek/stacked_capsule_autoencoders)
      (`capsules/primary.py`, `CapsuleImageEncoder`, `encoder_type=
      "conv_att"`)
    """

    def __init__(
        self,
        num_capsules=40,
        num_features=16,
        filters=(128, 128, 128, 128),
        strides=(2, 2, 1, 1),
        kernel_size=3,
        noise_scale=4.0,
        noise_at_inference=True,
        similarity=False,
        head_layout="official",
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_capsules = check_positive_int(num_capsules, "num_capsules")
        self.num_features = check_positive_int(num_features, "num_features")
        self.filters = check_int_tuple(filters, "filters")
        self.strides = check_int_tuple(
            strides,
            "strides",
            length=len(self.filters),
            meaning=", one per convolution",
        )
        self.kernel_size = check_positive_int(kernel_size, "kernel_size")
        self.noise_scale = check_non_negative_number(noise_scale, "noise_scale")
        self.noise_at_inference = check_bool(
            noise_at_inference, "noise_at_inference"
        )
        self.similarity = check_bool(similarity, "similarity")
        self.head_layout = check_option(
            head_layout, "head_layout", HEAD_LAYOUTS
        )
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.input_spec = keras.layers.InputSpec(ndim=4)

    @property
    def _values_per_capsule(self):
        return _POSE_DIM + self.num_features + 1

    def build(self, input_shape):
        channels = input_shape[-1]
        sizes = list(input_shape[1:3])
        for strides in self.strides:
            sizes = [
                None
                if size is None
                else (size - self.kernel_size) // strides + 1
                for size in sizes
            ]
            if any(size is not None and size < 1 for size in sizes):
                raise ValueError(
                    "The images are too small for the convolutions "
                    f"(kernel_size={self.kernel_size}, "
                    f"strides={self.strides}). "
                    f"Received: input_shape={tuple(input_shape)}"
                )
        self.convolutions = []
        for index, (filters, strides) in enumerate(
            zip(self.filters, self.strides)
        ):
            convolution = keras.layers.Conv2D(
                filters,
                self.kernel_size,
                strides=strides,
                padding="valid",
                activation="relu",
                kernel_initializer=linear_initializer(
                    self.kernel_size**2 * channels
                ),
                name=f"conv_{index}",
            )
            convolution.build(input_shape)
            input_shape = convolution.compute_output_shape(input_shape)
            channels = filters
            self.convolutions.append(convolution)
        self.feature_bias = self.add_weight(
            name="feature_bias",
            shape=tuple(input_shape[1:]),
            initializer="zeros",
        )
        self.head = keras.layers.Conv2D(
            self.num_capsules * (self._values_per_capsule + 1),
            1,
            kernel_initializer=linear_initializer(channels),
            name="head",
        )
        self.head.build(input_shape)

    def call(self, inputs, training=None):
        features = inputs
        for convolution in self.convolutions:
            features = convolution(features)
        features = self.head(features + self.feature_bias)
        batch = ops.shape(features)[0]
        positions = features.shape[1] * features.shape[2]
        features = ops.reshape(features, (batch, positions, -1))
        num_values = self.num_capsules * self._values_per_capsule
        values = ops.reshape(
            features[..., :num_values],
            (batch, positions, self._values_per_capsule, self.num_capsules),
        )
        attention = ops.softmax(features[..., num_values:], axis=1)
        pooled = ops.sum(values * attention[:, :, None, :], axis=1)
        if self.head_layout == "official":
            pooled = ops.reshape(
                pooled,
                (batch, self.num_capsules, self._values_per_capsule),
            )
        else:
            pooled = ops.transpose(pooled, (0, 2, 1))
        pose_params = pooled[..., :_POSE_DIM]
        part_features = pooled[..., _POSE_DIM:-1]
        presence_logits = pooled[..., -1]
        if self.noise_scale > 0 and (training or self.noise_at_inference):
            noise = keras.random.uniform(
                ops.shape(presence_logits),
                minval=-0.5,
                maxval=0.5,
                dtype=presence_logits.dtype,
                seed=self.seed_generator,
            )
            presence_logits = presence_logits + noise * self.noise_scale
        return {
            "poses": geometric_transform(
                pose_params, similarity=self.similarity
            ),
            "features": part_features,
            "presence": ops.sigmoid(presence_logits),
            "presence_logits": presence_logits,
        }

    def compute_output_shape(self, input_shape):
        batch = input_shape[0]
        return {
            "poses": (batch, self.num_capsules, _POSE_DIM),
            "features": (batch, self.num_capsules, self.num_features),
            "presence": (batch, self.num_capsules),
            "presence_logits": (batch, self.num_capsules),
        }

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_capsules": self.num_capsules,
                "num_features": self.num_features,
                "filters": self.filters,
                "strides": self.strides,
                "kernel_size": self.kernel_size,
                "noise_scale": self.noise_scale,
                "noise_at_inference": self.noise_at_inference,
                "similarity": self.similarity,
                "head_layout": self.head_layout,
                "seed": self.seed,
            }
        )
        return config
