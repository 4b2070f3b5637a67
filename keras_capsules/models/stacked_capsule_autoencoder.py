"""StackedCapsuleAutoencoder: capsules learned without labels (Kosiorek et
al. 2019)."""

import keras
from keras import ops

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_image_shape
from keras_capsules._validation import check_int_tuple
from keras_capsules._validation import check_non_negative_number
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import check_positive_number
from keras_capsules.layers._sonnet import dense
from keras_capsules.layers.object_capsule_decoder import ObjectCapsuleDecoder
from keras_capsules.layers.part_capsule_encoder import PartCapsuleEncoder
from keras_capsules.layers.set_transformer import SetTransformer
from keras_capsules.layers.template_decoder import TemplateDecoder
from keras_capsules.models._base import ModelConventions
from keras_capsules.models._images import mask_non_finite
from keras_capsules.models._images import standardize as standardize_images
from keras_capsules.models._scae_training import TRACKED
from keras_capsules.models._scae_training import OfficialTraining
from keras_capsules.ops.mixtures import part_pose_log_likelihood
from keras_capsules.ops.mixtures import template_mixture_log_likelihood
from keras_capsules.ops.mixtures import template_mixture_mode

_ARCHITECTURES = {
    "mnist": {
        "description": "The official MNIST network: 40x40x1 images, 40 "
        "part capsules with 11x11 templates, 32 object capsules (the "
        "defaults).",
        "config": {},
    },
}


@keras.saving.register_keras_serializable(package="keras_capsules")
class StackedCapsuleAutoencoder(
    OfficialTraining,
    ModelConventions,
    keras.Model,
    architectures=_ARCHITECTURES,
):
    """Stacked Capsule Autoencoder: part and object capsules learned from
    unlabelled images.

    Two autoencoders, stacked (Kosiorek et al. 2019). The part capsule
    autoencoder explains an image as a mixture of learned templates, each
    placed by the affine pose of a part capsule
    (`keras_capsules.layers.PartCapsuleEncoder`,
    `keras_capsules.layers.TemplateDecoder`). The object capsule
    autoencoder explains the set of part poses: a Set Transformer
    (`keras_capsules.layers.SetTransformer`) encodes the parts into object
    capsules, each of which votes for every part's pose through its
    object-viewer and object-part relations
    (`keras_capsules.layers.ObjectCapsuleDecoder`), and the part poses are
    scored as a mixture of these votes. No label is used: on MNIST the
    object capsules' presences cluster by digit class.

    The defaults are the official MNIST configuration (`from_preset(
    "mnist")`), including the choices where the official code departs
    from the paper; docs/stacked_capsule_autoencoders.md lists them.

    **Training.** `fit(x)` trains on images alone and minimises

        - image log-likelihood - part_likelihood_weight * part log-lik.
        + dynamic_l2_weight * |dynamic OP|^2 / 2
        + prior_within_sparsity_weight * prior within (l2)
        + prior_between_sparsity_weight * prior between (l2)
        + posterior_within_sparsity_weight * posterior within (entropy)
        - posterior_between_sparsity_weight * posterior between (entropy)

    (`keras_capsules.ops.capsule_sparsity`; the prior terms are on the
    object presences, the posterior ones on the share of the parts each
    object explains). The object autoencoder sees the part poses,
    presences and templates with their gradient stopped, and the parts'
    special features with it, as in the official code. `fit(x, y)` with
    integer labels also trains two linear probes, on the object presences
    (prior) and on the part mass each object explains (posterior), whose
    inputs are held out of the gradient: the labels reach nothing else.
    Every term, and the probes' losses and accuracies, are logged.
    `compile()` gives the official optimizer.

    **Outputs.** `call` and `predict` return a dict: `"object_presence"`
    `(batch, num_objects)`, `"object_poses"` `(batch, num_objects, 6)`
    (the object-viewer transforms), `"object_posterior_presence"`
    `(batch, num_objects)` (the part mass each object explains, the
    official clustering feature), `"part_poses"` `(batch, num_parts, 6)`,
    `"part_presence"` `(batch, num_parts)`, the per-example
    `"image_log_likelihood"`, `"part_log_likelihood"` and `"dynamic_l2"`,
    and the probes' `"prior_logits"` and `"posterior_logits"`
    `(batch, num_classes)`. Images follow the package's rules: floats in
    `[0, 1]`, or `uint8` in `[0, 255]`; an image with a non-finite pixel
    gives NaN outputs.

    Paper: [Stacked Capsule Autoencoders](https://arxiv.org/abs/1906.06818)
    (Kosiorek, Sabour, Teh & Hinton, NeurIPS 2019).

    Args:
        image_shape: Tuple `(height, width, channels)`. Defaults to
            `(40, 40, 1)`.
        num_parts: Positive int, part capsules (and templates). Defaults
            to `40`.
        num_objects: Positive int, object capsules. Defaults to `32`.
        template_size: Tuple `(h, w)`. Defaults to `(11, 11)`.
        num_part_features: Positive int, special features per part.
            Defaults to `16`.
        object_dim: Positive int, the size of the Set Transformer's
            output per object. Defaults to `256`.
        num_classes: Positive int, the classes of the probes and the
            sparsity targets. Defaults to `10`.
        colorize_templates: Boolean. Defaults to `True`.
        use_alpha_channel: Boolean. Defaults to `True`.
        noise_scale: Non-negative float, the width of the uniform noise
            on the presence logits of parts and objects. Defaults to `4.0`.
        noise_at_inference: Boolean, whether that noise is also added
            outside training, as the official code does. Defaults to
            `True`.
        part_head_layout: `"official"` or `"per_capsule"`; see
            `keras_capsules.layers.PartCapsuleEncoder`. Defaults to
            `"official"`.
        presence_masking: `"official"` or `"log"`; see
            `keras_capsules.layers.SetTransformer`. Defaults to
            `"official"`.
        normalize_part_mixing: Boolean, see
            `keras_capsules.ops.part_pose_log_likelihood`. Defaults to
            `False` (official).
        part_likelihood_weight: Non-negative float. Defaults to `1.0`.
        dynamic_l2_weight: Non-negative float. Defaults to `10.0`.
        prior_within_sparsity_weight: Non-negative float. Defaults to
            `2.0`.
        prior_between_sparsity_weight: Non-negative float. Defaults to
            `0.35`.
        posterior_within_sparsity_weight: Non-negative float. Defaults to
            `0.7`.
        posterior_between_sparsity_weight: Non-negative float. Defaults
            to `0.2`.
        prior_within_example_constant: Positive float or `None` for
            `num_objects / num_classes` (3.2, what the official run used).
            Defaults to `None`.
        seed: Optional int, for the templates' initialisation and the
            noise. Defaults to `None`.
        **kwargs: Base model arguments, such as `name`.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> model = keras_capsules.models.StackedCapsuleAutoencoder(
    ...     image_shape=(28, 28, 1), num_parts=8, num_objects=4,
    ...     object_dim=16,
    ... )
    >>> outputs = model(np.zeros((2, 28, 28, 1), "float32"))
    >>> tuple(outputs["object_presence"].shape)
    (2, 4)

    Reference:
    - [The official TensorFlow code](
      https://github.com/akosiorek/stacked_capsule_autoencoders)
      (`capsules/models/scae.py`, `ImageAutoencoder`;
      `capsules/configs/model_config.py`; `run_mnist.sh`)
    """

    def __init__(
        self,
        image_shape=(40, 40, 1),
        num_parts=40,
        num_objects=32,
        template_size=(11, 11),
        num_part_features=16,
        object_dim=256,
        num_classes=10,
        colorize_templates=True,
        use_alpha_channel=True,
        noise_scale=4.0,
        noise_at_inference=True,
        part_head_layout="official",
        presence_masking="official",
        normalize_part_mixing=False,
        part_likelihood_weight=1.0,
        dynamic_l2_weight=10.0,
        prior_within_sparsity_weight=2.0,
        prior_between_sparsity_weight=0.35,
        posterior_within_sparsity_weight=0.7,
        posterior_between_sparsity_weight=0.2,
        prior_within_example_constant=None,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.image_shape = check_image_shape(image_shape)
        self.num_parts = check_positive_int(num_parts, "num_parts")
        self.num_objects = check_positive_int(num_objects, "num_objects")
        self.template_size = check_int_tuple(
            template_size, "template_size", length=2
        )
        self.num_part_features = check_positive_int(
            num_part_features, "num_part_features"
        )
        self.object_dim = check_positive_int(object_dim, "object_dim")
        self.num_classes = check_positive_int(num_classes, "num_classes")
        self.colorize_templates = check_bool(
            colorize_templates, "colorize_templates"
        )
        self.use_alpha_channel = check_bool(
            use_alpha_channel, "use_alpha_channel"
        )
        self.noise_scale = check_non_negative_number(noise_scale, "noise_scale")
        self.noise_at_inference = check_bool(
            noise_at_inference, "noise_at_inference"
        )
        self.part_head_layout = part_head_layout
        self.presence_masking = presence_masking
        self.normalize_part_mixing = check_bool(
            normalize_part_mixing, "normalize_part_mixing"
        )
        self.loss_weights = {}
        for name, value in (
            ("part_likelihood_weight", part_likelihood_weight),
            ("dynamic_l2_weight", dynamic_l2_weight),
            ("prior_within_sparsity_weight", prior_within_sparsity_weight),
            ("prior_between_sparsity_weight", prior_between_sparsity_weight),
            (
                "posterior_within_sparsity_weight",
                posterior_within_sparsity_weight,
            ),
            (
                "posterior_between_sparsity_weight",
                posterior_between_sparsity_weight,
            ),
        ):
            self.loss_weights[name] = float(
                check_non_negative_number(value, name)
            )
        if prior_within_example_constant is not None:
            prior_within_example_constant = check_positive_number(
                prior_within_example_constant, "prior_within_example_constant"
            )
        self.prior_within_example_constant = prior_within_example_constant
        self.seed = seed
        noise_seed = None if seed is None else seed + 1
        self.part_encoder = PartCapsuleEncoder(
            num_capsules=num_parts,
            num_features=num_part_features,
            noise_scale=noise_scale,
            noise_at_inference=noise_at_inference,
            head_layout=part_head_layout,
            seed=noise_seed,
            name="part_encoder",
        )
        self.template_decoder = TemplateDecoder(
            output_size=self.image_shape[:2],
            num_templates=num_parts,
            template_size=self.template_size,
            channels=self.image_shape[2],
            colorize=colorize_templates,
            use_alpha_channel=use_alpha_channel,
            seed=seed,
            name="template_decoder",
        )
        self.object_encoder = SetTransformer(
            num_outputs=num_objects,
            output_dim=object_dim,
            presence_masking=presence_masking,
            name="object_encoder",
        )
        self.object_decoder = ObjectCapsuleDecoder(
            num_parts=num_parts,
            noise_scale=noise_scale,
            noise_at_inference=noise_at_inference,
            seed=None if seed is None else seed + 2,
            name="object_decoder",
        )
        self.prior_probe = dense(num_classes, num_objects, name="prior_probe")
        self.posterior_probe = dense(
            num_classes, num_objects, name="posterior_probe"
        )
        self.trackers = {
            name: keras.metrics.Mean(name=name) for name in TRACKED
        }
        self.build((None,) + self.image_shape)

    def build(self, input_shape):
        if self.built:
            return
        batch = input_shape[0]
        parts = (batch, self.num_parts)
        self.part_encoder.build(input_shape)
        features = parts + (self.num_part_features,)
        self.template_decoder.build(parts + (6,), features)
        template_values = (
            self.template_size[0] * self.template_size[1] * self.image_shape[2]
        )
        self.object_encoder.build(
            parts + (6 + 1 + self.num_part_features + template_values,),
            parts,
        )
        self.object_decoder.build((batch, self.num_objects, self.object_dim))
        self.prior_probe.build((batch, self.num_objects))
        self.posterior_probe.build((batch, self.num_objects))
        self.built = True

    def call(self, inputs, training=None):
        images = standardize_images(
            inputs, self.image_shape, type(self).__name__
        )
        batch = ops.shape(images)[0]
        parts = self.part_encoder(images, training=training)
        poses, presence = parts["poses"], parts["presence"]
        # One decoder pass: its unwarped templates also feed the object
        # encoder.
        image = self.template_decoder(poses, parts["features"])
        templates = image["source_templates"]
        templates = ops.broadcast_to(
            templates, (batch,) + tuple(templates.shape[1:])
        )
        # As in the official code: poses, presences and templates reach
        # the object encoder with their gradient stopped, the special
        # features with it (in this order).
        set_inputs = ops.concatenate(
            [
                ops.stop_gradient(poses),
                ops.stop_gradient(1.0 - presence[..., None]),
                parts["features"],
                ops.stop_gradient(
                    ops.reshape(templates, (batch, self.num_parts, -1))
                ),
            ],
            axis=-1,
        )
        objects = self.object_decoder(
            self.object_encoder(set_inputs, ops.stop_gradient(presence)),
            training=training,
        )
        part_log_likelihood, posterior = part_pose_log_likelihood(
            ops.stop_gradient(poses),
            objects["votes"],
            objects["vote_scales"],
            objects["vote_presence"],
            ops.stop_gradient(presence),
            normalize_mixing=self.normalize_part_mixing,
        )
        image_log_likelihood = template_mixture_log_likelihood(
            images,
            image["templates"],
            image["template_logits"],
            presence,
            image["background"],
            image["background_logit"],
        )
        posterior_presence = ops.sum(posterior, axis=1)
        outputs = {
            "object_presence": objects["presence"],
            "object_poses": objects["poses"],
            "object_posterior_presence": posterior_presence,
            "part_poses": poses,
            "part_presence": presence,
            "image_log_likelihood": ops.sum(
                image_log_likelihood, axis=(1, 2, 3)
            ),
            "part_log_likelihood": part_log_likelihood,
            "dynamic_l2": objects["dynamic_l2"],
            "prior_logits": self.prior_probe(
                ops.stop_gradient(objects["presence"])
            ),
            "posterior_logits": self.posterior_probe(
                ops.stop_gradient(posterior_presence)
            ),
        }
        return mask_non_finite(images, outputs)

    def reconstruct(self, x, return_parts=False):
        """The part autoencoder's reconstruction of images `x`: at every
        pixel, the value of the most probable template (or background),
        the official `rec_mode`. Returns a tensor of the images' shape;
        with `return_parts=True`, also the index of the part that explains
        each pixel (`num_parts` for the background), int32, of shape
        `(batch, height, width, 1)`."""
        images = standardize_images(x, self.image_shape, type(self).__name__)
        parts = self.part_encoder(images)
        image = self.template_decoder(parts["poses"], parts["features"])
        return template_mixture_mode(
            image["templates"],
            image["template_logits"],
            parts["presence"],
            image["background"],
            image["background_logit"],
            return_components=return_parts,
        )

    def get_config(self):
        config = {
            "name": self.name,
            "image_shape": self.image_shape,
            "num_parts": self.num_parts,
            "num_objects": self.num_objects,
            "template_size": self.template_size,
            "num_part_features": self.num_part_features,
            "object_dim": self.object_dim,
            "num_classes": self.num_classes,
            "colorize_templates": self.colorize_templates,
            "use_alpha_channel": self.use_alpha_channel,
            "noise_scale": self.noise_scale,
            "noise_at_inference": self.noise_at_inference,
            "part_head_layout": self.part_head_layout,
            "presence_masking": self.presence_masking,
            "normalize_part_mixing": self.normalize_part_mixing,
            "prior_within_example_constant": (
                self.prior_within_example_constant
            ),
            "seed": self.seed,
        }
        config.update(self.loss_weights)
        return config
