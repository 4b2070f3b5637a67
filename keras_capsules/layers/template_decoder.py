"""The template decoder of Stacked Capsule Autoencoders."""

import random

import keras
import numpy as np
from keras import ops

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_int
from keras_capsules._validation import check_int_tuple
from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_int
from keras_capsules.layers._linear import linear
from keras_capsules.ops.templates import warp_templates

ACTIVATIONS = ("sigmoid", "relu1")


def _activation(name, x):
    if name == "sigmoid":
        return ops.sigmoid(x)
    # The official `relu1`: relu6(6 x) / 6, that is x clipped to [0, 1].
    return ops.clip(x, 0.0, 1.0)


def orthogonal_templates(shape, seed):
    """The official initial template logits: rows of the Q of a QR
    decomposition of a square uniform matrix (so that the templates are
    orthogonal to each other), rescaled to span `[0, 1]`. Drawn by NumPy's
    generator seeded with the int `seed`, the same on every backend."""
    num_templates = shape[0]
    size = int(np.prod(shape[1:]))
    n = max(num_templates, size)
    q = np.linalg.qr(np.random.default_rng(seed).uniform(size=(n, n)))[0]
    q = q[:num_templates, :size].reshape(shape)
    return (q - q.min()) / (q.max() - q.min())


@keras.saving.register_keras_serializable(package="keras_capsules")
class TemplateDecoder(keras.layers.Layer):
    """Places learned templates on the canvas, one per part capsule.

    The decoder of the part capsule autoencoder of Stacked Capsule
    Autoencoders. It holds `num_parts` learned templates of
    `template_size`, passed through `template_activation` (official MNIST:
    a sigmoid), initialised as in the official code to mutually
    orthogonal patterns rescaled to `[0, 1]` (drawn from `seed`; without
    one, from a seed that `keras.utils.set_random_seed` fixes). With
    `colorize_templates=True` each template is multiplied by a colour that
    a small MLP (32 ReLU units, one output per channel, then
    `color_activation`) computes from its part's special features. Each
    part's pose warps its template onto the canvas
    (`keras_capsules.ops.warp_templates`).

    The image is then a mixture with one component per template and one
    for the background, a learned constant `sigmoid(background_value)`;
    `keras_capsules.ops.template_mixture_log_likelihood` and
    `keras_capsules.ops.template_mixture_mode` take what this layer
    returns. With `use_alpha_channel=True` (official MNIST) every template
    has learned per-pixel mixing logits (zeros at first, warped like the
    template) and the background a learned logit
    `softplus(background_logit)`; otherwise the mixing logits are the
    warped templates and the background value divided by a learned
    temperature, `softplus(temperature_logit + 0.5) + 1e-4`.

    Paper: [Stacked Capsule Autoencoders](https://arxiv.org/abs/1906.06818)
    (Kosiorek, Sabour, Teh & Hinton, NeurIPS 2019).

    Args:
        output_size: Tuple `(height, width)` of the canvas. Defaults to
            `(40, 40)`.
        num_parts: Positive int, the part capsules (one template each).
            Defaults to `40`.
        template_size: Tuple `(h, w)`. Defaults to `(11, 11)`.
        channels: Positive int, the channels of the images. Defaults to
            `1`.
        colorize_templates: Boolean, whether to colour each template from
            its part's features. Defaults to `True`.
        use_alpha_channel: Boolean, whether the templates have learned
            mixing logits (see above). Defaults to `True`.
        template_activation: `"sigmoid"` or `"relu1"` (clip to `[0, 1]`).
            Defaults to `"sigmoid"`.
        color_activation: `"sigmoid"` or `"relu1"` (the colour logits are
            then shifted by `0.99` first, as in the official code).
            Defaults to `"sigmoid"`.
        seed: Optional int `>= 0`, the seed of the templates'
            initialisation. Defaults to `None`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        poses: `(batch, num_parts, 6)` affine transforms.
        features: `(batch, num_parts, num_part_features)` special
            features; needed with `colorize_templates=True`.

    Output shape:
        A dict of tensors: `"source_templates"` the templates before
        warping (see `templates`), `"templates"` the warped templates
        `(batch, num_parts, height, width, channels)`, `"template_logits"`
        their mixing logits `(batch, num_parts, height, width, 1)` (or
        `channels`), and `"background"` and `"background_logit"` of shape
        `(1,)`.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> decoder = keras_capsules.layers.TemplateDecoder()
    >>> poses = keras_capsules.ops.geometric_transform(
    ...     np.zeros((2, 40, 6), "float32")
    ... )
    >>> out = decoder(poses, np.zeros((2, 40, 16), "float32"))
    >>> tuple(out["templates"].shape)
    (2, 40, 40, 40, 1)

    Reference:
    - [The official TensorFlow code](
      https://github.com/akosiorek/stacked_capsule_autoencoders)
      (`capsules/primary.py`, `TemplateBasedImageDecoder`)
    """

    def __init__(
        self,
        output_size=(40, 40),
        num_parts=40,
        template_size=(11, 11),
        channels=1,
        colorize_templates=True,
        use_alpha_channel=True,
        template_activation="sigmoid",
        color_activation="sigmoid",
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.output_size = check_int_tuple(output_size, "output_size", 2)
        self.num_parts = check_positive_int(num_parts, "num_parts")
        self.template_size = check_int_tuple(template_size, "template_size", 2)
        self.channels = check_positive_int(channels, "channels")
        self.colorize_templates = check_bool(
            colorize_templates, "colorize_templates"
        )
        self.use_alpha_channel = check_bool(
            use_alpha_channel, "use_alpha_channel"
        )
        self.template_activation = check_option(
            template_activation, "template_activation", ACTIVATIONS
        )
        self.color_activation = check_option(
            color_activation, "color_activation", ACTIVATIONS
        )
        self.seed = check_int(seed, "seed", allow_none=True)

    def build(self, poses_shape, features_shape=None):
        if tuple(poses_shape[1:]) != (self.num_parts, 6):
            raise ValueError(
                "Argument poses must have shape (batch, num_parts, 6) = "
                f"(batch, {self.num_parts}, 6). "
                f"Received: poses.shape={tuple(poses_shape)}"
            )
        shape = (self.num_parts,) + self.template_size
        # Without a seed, one from Python's generator, which
        # `keras.utils.set_random_seed` seeds (as Keras's initializers
        # draw theirs).
        seed = self.seed
        if seed is None:
            seed = random.randint(1, 10**9)
        self.template_logits = self.add_weight(
            name="template_logits",
            shape=shape + (self.channels,),
            initializer=lambda shape, dtype=None: ops.cast(
                orthogonal_templates(shape, seed), dtype
            ),
        )
        if self.use_alpha_channel:
            self.template_alpha = self.add_weight(
                name="template_alpha", shape=shape + (1,), initializer="zeros"
            )
            self.background_logit = self.add_weight(
                name="background_logit", shape=(1,), initializer="zeros"
            )
        else:
            self.temperature_logit = self.add_weight(
                name="temperature_logit",
                shape=(1,),
                initializer="glorot_uniform",
            )
        self.background_value = self.add_weight(
            name="background_value", shape=(1,), initializer="glorot_uniform"
        )
        if self.colorize_templates:
            if features_shape is None:
                raise ValueError(
                    "TemplateDecoder(colorize_templates=True) needs the "
                    "parts' features. Received: features=None"
                )
            self.color_hidden = linear(
                32, "color_hidden", "relu", dtype=self.dtype_policy
            )
            self.color_hidden.build(features_shape)
            self.color_output = linear(
                self.channels, "color_output", dtype=self.dtype_policy
            )
            self.color_output.build(tuple(features_shape[:-1]) + (32,))

    def templates(self, features=None):
        """The templates before warping: `(1, num_parts, h, w, channels)`,
        or with `colorize_templates=True` and `features` coloured by the
        features of each example, `(batch, num_parts, h, w, channels)`."""
        templates = ops.expand_dims(
            _activation(self.template_activation, self.template_logits), 0
        )
        if not self.colorize_templates or features is None:
            return templates
        color = self.color_output(self.color_hidden(features))
        if self.color_activation == "relu1":
            color = color + 0.99
        color = _activation(self.color_activation, color)
        return templates * color[:, :, None, None, :]

    def call(self, poses, features=None):
        templates = self.templates(features)
        background = ops.sigmoid(self.background_value)
        if self.use_alpha_channel:
            stacked = ops.concatenate(
                [
                    templates,
                    ops.broadcast_to(
                        self.template_alpha[None],
                        tuple(ops.shape(templates)[:-1]) + (1,),
                    ),
                ],
                axis=-1,
            )
            warped = warp_templates(stacked, poses, self.output_size)
            warped_templates = warped[..., : self.channels]
            logits = warped[..., self.channels :]
            background_logit = ops.softplus(self.background_logit)
        else:
            warped_templates = warp_templates(
                templates, poses, self.output_size
            )
            temperature = ops.softplus(self.temperature_logit + 0.5) + 1e-4
            logits = warped_templates / temperature
            background_logit = background / temperature
        return {
            "source_templates": templates,
            "templates": warped_templates,
            "template_logits": logits,
            "background": background,
            "background_logit": background_logit,
        }

    def compute_output_shape(self, poses_shape, features_shape=None):
        batch = poses_shape[0]
        canvas = (batch, self.num_parts) + self.output_size
        source = self.template_size + (self.channels,)
        return {
            "source_templates": (
                batch if self.colorize_templates else 1,
                self.num_parts,
            )
            + source,
            "templates": canvas + (self.channels,),
            "template_logits": canvas
            + (1 if self.use_alpha_channel else self.channels,),
            "background": (1,),
            "background_logit": (1,),
        }

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "output_size": self.output_size,
                "num_parts": self.num_parts,
                "template_size": self.template_size,
                "channels": self.channels,
                "colorize_templates": self.colorize_templates,
                "use_alpha_channel": self.use_alpha_channel,
                "template_activation": self.template_activation,
                "color_activation": self.color_activation,
                "seed": self.seed,
            }
        )
        return config
