"""The part capsule encoder of Stacked Capsule Autoencoders."""

import keras
from keras import ops

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_int_tuple
from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_int
from keras_capsules.initializers.fan_in_truncated_normal import (
    FanInTruncatedNormal,
)
from keras_capsules.layers._presence_noise import check_noise_arguments
from keras_capsules.layers._presence_noise import presence_noise
from keras_capsules.layers._presence_noise import save_seed_state
from keras_capsules.layers._presence_noise import without_seed_state
from keras_capsules.ops.poses import geometric_transform

PART_HEAD_LAYOUTS = ("interleaved", "per_capsule")
_POSE_DIM = 6


@keras.saving.register_keras_serializable(package="keras_capsules")
class PartCapsuleEncoder(keras.layers.Layer):
    """Encodes an image into part capsules: poses, features, presences.

    The encoder of the part capsule autoencoder of Stacked Capsule
    Autoencoders, as the official code builds it for MNIST: ReLU
    convolutions (`"valid"` padding), a learned bias over the whole feature
    map, and a 1x1 convolution that gives, at every position,
    `num_parts * (6 + num_part_features + 1)` values and `num_parts`
    attention logits. Each part's values are averaged over the positions
    with the softmax of its attention logits (attention pooling), then
    split into 6 pose parameters (an affine transform by
    `keras_capsules.ops.geometric_transform`), `num_part_features`
    special features and a presence logit.

    `part_head_layout="interleaved"` reads the pooled
    `(values, parts)` array as the official code does, by a reshape: one
    part's values are pooled with several parts' attention maps.
    `"per_capsule"` transposes it, so that each part's values are pooled
    with its own attention (the same parameters).

    **Presence noise.** In training, uniform noise in
    `[-noise_scale / 2, noise_scale / 2]` is added to the presence logits
    before the sigmoid, drawn anew at every step. Outside training the
    layer is deterministic, unless `inference_noise_seed` is an int: then
    the noise is added outside training too, as the official evaluation
    does, drawn from that seed alone (the same noise at every call).

    Paper: [Stacked Capsule Autoencoders](https://arxiv.org/abs/1906.06818)
    (Kosiorek, Sabour, Teh & Hinton, NeurIPS 2019).

    Args:
        num_parts: Positive int, the number of part capsules. Defaults to
            `40` (official MNIST).
        num_part_features: Positive int, the special features per part.
            Defaults to `16`.
        filters: Tuple of positive ints, the filters of each convolution.
            Defaults to `(128, 128, 128, 128)`.
        strides: Tuple of positive ints, one per convolution. Defaults to
            `(2, 2, 1, 1)`.
        kernel_size: Positive int, the kernel size of every convolution.
            Defaults to `3`.
        noise_scale: Non-negative float, the width of the presence noise.
            Defaults to `4.0`.
        inference_noise_seed: Optional int `>= 0`, see above. Defaults to
            `None` (no noise outside training).
        similarity: Boolean, whether the poses are similarity transforms
            (no shear, one scale). Defaults to `False`.
        part_head_layout: `"interleaved"` or `"per_capsule"` (see above).
            Defaults to `"interleaved"`.
        seed: Optional int, the seed of the training noise. Defaults to
            `None`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Input shape:
        `(batch, height, width, channels)` images.

    Output shape:
        A dict of tensors: `"poses"` `(batch, num_parts, 6)` (the affine
        transforms `(a, b, tx, c, d, ty)`), `"features"`
        `(batch, num_parts, num_part_features)`, `"presence"` and
        `"presence_logits"` `(batch, num_parts)`.

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
        num_parts=40,
        num_part_features=16,
        filters=(128, 128, 128, 128),
        strides=(2, 2, 1, 1),
        kernel_size=3,
        noise_scale=4.0,
        inference_noise_seed=None,
        similarity=False,
        part_head_layout="interleaved",
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_parts = check_positive_int(num_parts, "num_parts")
        self.num_part_features = check_positive_int(
            num_part_features, "num_part_features"
        )
        self.filters = check_int_tuple(filters, "filters")
        self.strides = check_int_tuple(
            strides,
            "strides",
            length=len(self.filters),
            meaning=", one per convolution",
        )
        self.kernel_size = check_positive_int(kernel_size, "kernel_size")
        self.noise_scale, self.inference_noise_seed = check_noise_arguments(
            noise_scale, inference_noise_seed
        )
        self.similarity = check_bool(similarity, "similarity")
        self.part_head_layout = check_option(
            part_head_layout, "part_head_layout", PART_HEAD_LAYOUTS
        )
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.input_spec = keras.layers.InputSpec(ndim=4)

    @property
    def _values_per_capsule(self):
        return _POSE_DIM + self.num_part_features + 1

    def build(self, input_shape):
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
                kernel_initializer=FanInTruncatedNormal(),
                dtype=self.dtype_policy,
                name=f"conv_{index}",
            )
            convolution.build(input_shape)
            input_shape = convolution.compute_output_shape(input_shape)
            self.convolutions.append(convolution)
        self.feature_bias = self.add_weight(
            name="feature_bias",
            shape=tuple(input_shape[1:]),
            initializer="zeros",
        )
        self.head = keras.layers.Conv2D(
            self.num_parts * (self._values_per_capsule + 1),
            1,
            kernel_initializer=FanInTruncatedNormal(),
            dtype=self.dtype_policy,
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
        num_values = self.num_parts * self._values_per_capsule
        values = ops.reshape(
            features[..., :num_values],
            (batch, positions, self._values_per_capsule, self.num_parts),
        )
        attention = ops.softmax(features[..., num_values:], axis=1)
        pooled = ops.sum(values * attention[:, :, None, :], axis=1)
        if self.part_head_layout == "interleaved":
            pooled = ops.reshape(
                pooled,
                (batch, self.num_parts, self._values_per_capsule),
            )
        else:
            pooled = ops.transpose(pooled, (0, 2, 1))
        pose_params = pooled[..., :_POSE_DIM]
        part_features = pooled[..., _POSE_DIM:-1]
        presence_logits = pooled[..., -1]
        noise = presence_noise(
            self, ops.shape(presence_logits), presence_logits.dtype, training
        )
        if noise is not None:
            presence_logits = presence_logits + noise
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
            "poses": (batch, self.num_parts, _POSE_DIM),
            "features": (batch, self.num_parts, self.num_part_features),
            "presence": (batch, self.num_parts),
            "presence_logits": (batch, self.num_parts),
        }

    def save_own_variables(self, store):
        super().save_own_variables(store)
        save_seed_state(self, store)

    def load_own_variables(self, store):
        super().load_own_variables(without_seed_state(self, store))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_parts": self.num_parts,
                "num_part_features": self.num_part_features,
                "filters": self.filters,
                "strides": self.strides,
                "kernel_size": self.kernel_size,
                "noise_scale": self.noise_scale,
                "inference_noise_seed": self.inference_noise_seed,
                "similarity": self.similarity,
                "part_head_layout": self.part_head_layout,
                "seed": self.seed,
            }
        )
        return config
