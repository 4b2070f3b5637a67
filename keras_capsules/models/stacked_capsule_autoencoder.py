"""StackedCapsuleAutoencoder: capsules learned without labels (Kosiorek et
al. 2019)."""

import keras
from keras import ops

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_image_shape
from keras_capsules._validation import check_int
from keras_capsules._validation import check_int_tuple
from keras_capsules._validation import check_no_input_shape
from keras_capsules._validation import check_positive_int
from keras_capsules.layers._linear import linear
from keras_capsules.layers.object_capsule_decoder import ObjectCapsuleDecoder
from keras_capsules.layers.part_capsule_encoder import PartCapsuleEncoder
from keras_capsules.layers.set_transformer import SetTransformer
from keras_capsules.layers.template_decoder import TemplateDecoder
from keras_capsules.losses.stacked_capsule_autoencoder_loss import PROBE_TERMS
from keras_capsules.losses.stacked_capsule_autoencoder_loss import TERMS
from keras_capsules.losses.stacked_capsule_autoencoder_loss import (
    StackedCapsuleAutoencoderLoss,
)
from keras_capsules.models._base import CapsuleModel
from keras_capsules.models._images import standardize as standardize_images
from keras_capsules.models._scae_graph import scae_outputs
from keras_capsules.models._scae_upgrade import upgrade_config
from keras_capsules.ops.mixtures import template_mixture_mode
from keras_capsules.optimizers.rmsprop import RMSprop

_ARCHITECTURES = {
    "scae_mnist": {
        "description": "The official MNIST network: 40x40x1 images, 40 "
        "part capsules with 11x11 templates, 32 object capsules (the "
        "defaults).",
        "config": {},
    },
    "scae_mnist_fast": {
        "description": "The official MNIST network with "
        "presence_masking='log' (every part counts in the Set "
        "Transformer) and presence noise of width 1 (noise_scale=1.0, "
        "where the official width is 4); its compile() default is RMSprop "
        "at 3e-4 after a 100-step warm-up. Its object capsules separate "
        "most digit classes within 5,000 steps "
        "(docs/design/scae_variants.md).",
        "config": {"presence_masking": "log", "noise_scale": 1.0},
    },
}
# The official run_mnist.sh: learning rate 3e-5, constant (the flag that
# asks for a schedule has no effect), batch 128.
_OFFICIAL_BATCH_SIZE = 128
# The fast configuration (presence_masking="log"): the official RMSprop
# at ten times the rate, reached linearly over the first steps.
_FAST_LEARNING_RATE = 3e-4
_FAST_WARMUP_STEPS = 100


@keras.saving.register_keras_serializable(package="keras_capsules")
class StackedCapsuleAutoencoder(CapsuleModel, architectures=_ARCHITECTURES):
    """Stacked Capsule Autoencoder: part and object capsules learned from
    unlabelled images.

    Two autoencoders, stacked (docs/stacked_capsule_autoencoders.md). The
    part capsule autoencoder explains the image as a mixture of learned
    templates, each placed by a part capsule's pose (`PartCapsuleEncoder`,
    `TemplateDecoder`); the object capsule autoencoder encodes the set of
    parts into object capsules (`SetTransformer`) whose votes explain the
    part poses (`ObjectCapsuleDecoder`). No label is used: on MNIST the
    object capsules' presences cluster by digit class. The defaults are the
    official MNIST configuration (`from_preset("scae_mnist")`), including
    the choices where the official code departs from the paper.

    A functional model: images in, a dict out, the four layers nodes of
    its graph (`get_layer("part_encoder")`, `"template_decoder"`,
    `"object_encoder"`, `"object_decoder"`, and the probes
    `"prior_probe"`, `"posterior_probe"`). `fit(x)` trains without labels
    and `fit(x, y)` (integer or one-hot labels) also trains two linear
    probes whose inputs are held out of the gradient; the loss,
    `losses.StackedCapsuleAutoencoderLoss`, is computed from the outputs,
    and `fit` logs each of its terms. `compile()` gives the official
    optimizer and loss (for `presence_masking="log"`, as in the fast
    configuration `"scae_mnist_fast"`, a ten times higher rate; trained:
    `"stacked_capsule_autoencoder_mnist"`, docs/presets.md).

    **Outputs** of `call` and `predict`: `"object_presence"`
    `(batch, num_object_capsules)`; `"object_posterior_presence"` (the
    part mass each object explains, the official clustering feature);
    `"object_poses"` `(batch, num_object_capsules, 6)`; `"part_poses"`
    `(batch, num_parts, 6)` and `"part_presence"`; the per-example
    `"image_log_likelihood"`, `"part_log_likelihood"` and `"dynamic_l2"`
    the loss reads; the probes' `"prior_logits"` and `"posterior_logits"`
    `(batch, num_classes)`. Outside training the model is deterministic;
    `inference_noise_seed` adds the official evaluation's presence noise,
    drawn from that seed (the same at every call). Images follow the
    package's rules (floats in `[0, 1]` or `uint8`; a non-finite pixel
    gives NaN outputs).

    Paper: [Stacked Capsule Autoencoders](https://arxiv.org/abs/1906.06818)
    (Kosiorek, Sabour, Teh & Hinton, NeurIPS 2019).

    Args:
        image_shape: Tuple `(height, width, channels)`. Defaults to
            `(40, 40, 1)`.
        num_parts: Positive int, part capsules (and templates). Defaults
            to `40`.
        num_object_capsules: Positive int. Defaults to `32`.
        template_size: Tuple `(h, w)`. Defaults to `(11, 11)`.
        num_part_features: Positive int, special features per part.
            Defaults to `16`.
        object_capsule_dim: Positive int, the size of an object capsule
            (the Set Transformer's output). Defaults to `256`.
        num_classes: Positive int, the classes of the probes. Defaults to
            `10`.
        colorize_templates: Boolean. Defaults to `True`.
        use_alpha_channel: Boolean. Defaults to `True`.
        noise_scale: Non-negative float, the width of the uniform noise on
            the part and object presence logits in training. Defaults to
            `4.0`.
        inference_noise_seed: Optional int `>= 0`: add that noise outside
            training too, drawn from this seed. Defaults to `None`.
        part_head_layout: `"interleaved"` or `"per_capsule"`
            (`PartCapsuleEncoder`). Defaults to `"interleaved"`.
        presence_masking: `"most_present"` or `"log"` (`SetTransformer`;
            see `default_optimizer`). Defaults to `"most_present"`.
        normalize_part_mixing: Boolean (`ops.part_pose_log_likelihood`'s
            `normalize_mixing`). Defaults to `False` (official).
        seed: Optional int, for the templates' initialisation and the
            training noise. Defaults to `None`.
        **kwargs: Keyword arguments of `keras.Model`, such as `name`.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> model = keras_capsules.models.StackedCapsuleAutoencoder(
    ...     image_shape=(28, 28, 1), num_parts=8, num_object_capsules=4,
    ...     object_capsule_dim=16,
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
        num_object_capsules=32,
        template_size=(11, 11),
        num_part_features=16,
        object_capsule_dim=256,
        num_classes=10,
        colorize_templates=True,
        use_alpha_channel=True,
        noise_scale=4.0,
        inference_noise_seed=None,
        part_head_layout="interleaved",
        presence_masking="most_present",
        normalize_part_mixing=False,
        seed=None,
        **kwargs,
    ):
        check_no_input_shape(kwargs, "StackedCapsuleAutoencoder")
        image_shape = check_image_shape(image_shape)
        num_classes = check_positive_int(num_classes, "num_classes")
        template_size = check_int_tuple(template_size, "template_size", 2)
        check_bool(normalize_part_mixing, "normalize_part_mixing")
        seed = check_int(seed, "seed", allow_none=True)
        inference_noise_seed = check_int(
            inference_noise_seed, "inference_noise_seed", allow_none=True
        )

        # === Layers ===
        # Every seed apart, so that no two draws share one.
        def offset(value, by):
            return None if value is None else value + by

        part_encoder = PartCapsuleEncoder(
            num_parts=num_parts,
            num_part_features=num_part_features,
            noise_scale=noise_scale,
            inference_noise_seed=inference_noise_seed,
            part_head_layout=part_head_layout,
            seed=offset(seed, 1),
            name="part_encoder",
        )
        template_decoder = TemplateDecoder(
            output_size=image_shape[:2],
            num_parts=num_parts,
            template_size=template_size,
            channels=image_shape[2],
            colorize_templates=colorize_templates,
            use_alpha_channel=use_alpha_channel,
            seed=seed,
            name="template_decoder",
        )
        object_encoder = SetTransformer(
            num_object_capsules=num_object_capsules,
            object_capsule_dim=object_capsule_dim,
            presence_masking=presence_masking,
            name="object_encoder",
        )
        object_decoder = ObjectCapsuleDecoder(
            num_parts=num_parts,
            noise_scale=noise_scale,
            inference_noise_seed=offset(inference_noise_seed, 1),
            seed=offset(seed, 2),
            name="object_decoder",
        )
        prior_probe = linear(num_classes, "prior_probe")
        posterior_probe = linear(num_classes, "posterior_probe")

        # === Functional Model ===
        images = keras.Input(shape=image_shape, name="images")
        outputs = scae_outputs(
            images,
            part_encoder,
            template_decoder,
            object_encoder,
            object_decoder,
            (prior_probe, posterior_probe),
            normalize_part_mixing,
        )
        super().__init__(inputs=images, outputs=outputs, **kwargs)
        self.part_encoder = part_encoder
        self.template_decoder = template_decoder
        self.object_encoder = object_encoder
        self.object_decoder = object_decoder
        self.prior_probe = prior_probe
        self.posterior_probe = posterior_probe
        self.term_trackers = {
            name: keras.metrics.Mean(name=name) for name in TERMS + PROBE_TERMS
        }

        # === Config ===
        self.image_shape = image_shape
        self.num_parts = part_encoder.num_parts
        self.num_object_capsules = object_encoder.num_object_capsules
        self.template_size = template_size
        self.num_part_features = part_encoder.num_part_features
        self.object_capsule_dim = object_encoder.object_capsule_dim
        self.num_classes = num_classes
        self.colorize_templates = colorize_templates
        self.use_alpha_channel = use_alpha_channel
        self.noise_scale = noise_scale
        self.inference_noise_seed = inference_noise_seed
        self.part_head_layout = part_head_layout
        self.presence_masking = presence_masking
        self.normalize_part_mixing = normalize_part_mixing
        self.seed = seed

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

    def default_optimizer(self, total_steps=None):
        """The optimizer of `compile(optimizer="auto")`: the official
        RMSprop, `keras_capsules.optimizers.RMSprop(3e-5, rho=0.9,
        momentum=0.9, epsilon=1e-2 / 128**2, initial_velocity=1.0)`; with
        `presence_masking="log"` (the fast configuration,
        `from_preset("scae_mnist_fast")`), the same RMSprop at 3e-4,
        reached linearly from 0 over the first 100 steps.

        Its learning rate is constant after that, as in the official run,
        whatever `total_steps` says (accepted, as every model's `compile`
        takes it). The official epsilon is `1e-2 / batch_size**2` for the
        official batch of 128; for another batch size pass that optimizer
        with its own epsilon to `compile`.

        Args:
            total_steps: Optional positive integer, unused. Defaults to
                `None`.

        Returns:
            A `keras_capsules.optimizers.RMSprop`.
        """
        check_int(total_steps, "total_steps", minimum=1, allow_none=True)
        learning_rate = 3e-5
        if self.presence_masking == "log":
            # A warm-up to the rate, then the rate held (`alpha=1`).
            learning_rate = keras.optimizers.schedules.CosineDecay(
                0.0,
                decay_steps=1,
                alpha=1.0,
                warmup_target=_FAST_LEARNING_RATE,
                warmup_steps=_FAST_WARMUP_STEPS,
            )
        return RMSprop(
            learning_rate,
            rho=0.9,
            momentum=0.9,
            epsilon=1e-2 / _OFFICIAL_BATCH_SIZE**2,
            initial_velocity=1.0,
        )

    def default_loss(self):
        """The loss of `compile(loss="auto")`: the official objective,
        `keras_capsules.losses.StackedCapsuleAutoencoderLoss(num_classes=
        num_classes)`."""
        return StackedCapsuleAutoencoderLoss(num_classes=self.num_classes)

    def default_metrics(self):
        """The metrics of `compile(metrics="auto")`: none. The model logs
        the loss's terms and the probes' losses and accuracies itself."""
        return None

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        *,
        metrics="auto",
        jit_compile="auto",
        total_steps=None,
        **kwargs,
    ):
        """Configures the model for training, with the model's defaults.

        As every model's `compile` (docs/api.md). `loss` is `"auto"` (the
        official `losses.StackedCapsuleAutoencoderLoss`), an instance of
        that class with other settings, or any callable
        `loss(labels_or_none, outputs)` of the dict of outputs that
        returns a scalar (its terms are then not logged). `metrics` are
        Keras metrics keyed by output name (with labels), for example
        `{"prior_logits": keras.metrics.SparseCategoricalAccuracy()}`.
        `total_steps` is accepted and unused: the official learning rate
        is constant (see `default_optimizer`).

        Raises:
            ValueError: If `loss` is neither `"auto"` nor callable, or
                `total_steps` is given with an optimizer.
        """
        if loss is None or not (
            (isinstance(loss, str) and loss == "auto") or callable(loss)
        ):
            raise ValueError(
                "StackedCapsuleAutoencoder takes loss='auto', a "
                "keras_capsules.losses.StackedCapsuleAutoencoderLoss, or a "
                "callable of (labels, outputs) returning a scalar. "
                f"Received: loss={loss!r}"
            )
        super().compile(
            optimizer=optimizer,
            loss=loss,
            metrics=metrics,
            jit_compile=jit_compile,
            total_steps=total_steps,
            **kwargs,
        )
        # `compute_loss` takes the loss itself, never through Keras'
        # compiled loss, which would stay unbuilt: Keras would then trace
        # the model again (eagerly on PyTorch) in every `train_on_batch`,
        # `test_on_batch` and `evaluate` to build it.
        if self._compile_loss is not None:
            self._compile_loss.built = True

    def compile_from_config(self, config):
        # A model saved before the release was compiled with `loss=None`:
        # its loss was the official one.
        if config.get("loss") is None:
            config = {**config, "loss": "auto"}
        super().compile_from_config(config)

    def compute_loss(
        self, x=None, y=None, y_pred=None, sample_weight=None, training=True
    ):
        if sample_weight is not None:
            raise ValueError(
                "StackedCapsuleAutoencoder's loss is one number per batch "
                "(its sparsity terms are taken over the batch) and takes no "
                "sample weights. Received: sample_weight="
                f"{type(sample_weight).__name__}"
            )
        if isinstance(self.loss, StackedCapsuleAutoencoderLoss):
            loss, terms = self.loss.terms(y, y_pred)
            for name, value in terms.items():
                self.term_trackers[name].update_state(value)
        else:
            loss = self.loss(y, y_pred)
        # `dummy_vote` (unused, as in the official MNIST model) and, without
        # labels, the probes take a zero gradient: it leaves them as they
        # are and keeps Keras from warning about missing gradients.
        unused = [self.object_decoder.dummy_vote]
        if y is None:
            unused += self.prior_probe.weights + self.posterior_probe.weights
        loss = ops.cast(loss, "float32")
        loss = loss + 0.0 * sum(ops.sum(ops.cast(w, "float32")) for w in unused)
        for extra in self.losses:
            loss = loss + ops.cast(extra, "float32")
        return loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        logs = super().compute_metrics(x, y, y_pred, sample_weight)
        # Only the values this step computed: the loss's terms need a
        # `StackedCapsuleAutoencoderLoss`, the probes' labels too.
        logged = ()
        if isinstance(self.loss, StackedCapsuleAutoencoderLoss):
            logged = TERMS + (PROBE_TERMS if y is not None else ())
        return {
            name: value
            for name, value in logs.items()
            if name not in self.term_trackers or name in logged
        }

    @classmethod
    def from_config(cls, config):
        return cls(**upgrade_config(config))

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "image_shape": self.image_shape,
            "num_parts": self.num_parts,
            "num_object_capsules": self.num_object_capsules,
            "template_size": self.template_size,
            "num_part_features": self.num_part_features,
            "object_capsule_dim": self.object_capsule_dim,
            "num_classes": self.num_classes,
            "colorize_templates": self.colorize_templates,
            "use_alpha_channel": self.use_alpha_channel,
            "noise_scale": self.noise_scale,
            "inference_noise_seed": self.inference_noise_seed,
            "part_head_layout": self.part_head_layout,
            "presence_masking": self.presence_masking,
            "normalize_part_mixing": self.normalize_part_mixing,
            "seed": self.seed,
        }
