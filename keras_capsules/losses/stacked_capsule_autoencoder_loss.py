"""The objective of Stacked Capsule Autoencoders (Kosiorek et al. 2019)."""

import keras
from keras import ops

from keras_capsules._validation import check_non_negative_number
from keras_capsules._validation import check_positive_int
from keras_capsules._validation import check_positive_number
from keras_capsules.ops.sparsity import capsule_sparsity

# The official weights of the terms (`capsules/configs/model_config.py`,
# `run_mnist.sh`), in the order of the loss below.
DEFAULT_WEIGHTS = {
    "part_likelihood_weight": 1.0,
    "dynamic_l2_weight": 10.0,
    "prior_within_sparsity_weight": 2.0,
    "prior_between_sparsity_weight": 0.35,
    "posterior_within_sparsity_weight": 0.7,
    "posterior_between_sparsity_weight": 0.2,
}
# The names of the terms `terms` returns: always, and with labels.
TERMS = (
    "image_log_likelihood",
    "part_log_likelihood",
    "dynamic_l2",
    "prior_within_sparsity",
    "prior_between_sparsity",
    "posterior_within_sparsity",
    "posterior_between_sparsity",
)
PROBE_TERMS = (
    "prior_probe_loss",
    "posterior_probe_loss",
    "prior_probe_accuracy",
    "posterior_probe_accuracy",
)
# The outputs of `StackedCapsuleAutoencoder` the loss reads.
_NEEDED = (
    "image_log_likelihood",
    "part_log_likelihood",
    "dynamic_l2",
    "object_presence",
    "object_posterior_presence",
    "part_presence",
)
_PROBES = ("prior_logits", "posterior_logits")


def _check_settings(weights, num_classes, prior_within_example_constant):
    checked = {
        name: float(check_non_negative_number(value, name))
        for name, value in weights.items()
    }
    num_classes = check_positive_int(num_classes, "num_classes")
    if prior_within_example_constant is not None:
        prior_within_example_constant = float(
            check_positive_number(
                prior_within_example_constant, "prior_within_example_constant"
            )
        )
    return checked, num_classes, prior_within_example_constant


def _class_indices(labels, num_classes):
    """Integer labels, from integer or one-hot `labels`."""
    labels = ops.convert_to_tensor(labels)
    if len(labels.shape) == 2 and labels.shape[-1] == num_classes:
        return ops.cast(ops.argmax(labels, axis=-1), "int32")
    return ops.cast(ops.reshape(labels, (-1,)), "int32")


@keras.saving.register_keras_serializable(package="keras_capsules")
def stacked_capsule_autoencoder_loss(
    outputs,
    labels=None,
    part_likelihood_weight=1.0,
    dynamic_l2_weight=10.0,
    prior_within_sparsity_weight=2.0,
    prior_between_sparsity_weight=0.35,
    posterior_within_sparsity_weight=0.7,
    posterior_between_sparsity_weight=0.2,
    num_classes=10,
    prior_within_example_constant=None,
    return_terms=False,
):
    """The Stacked Capsule Autoencoder's loss on a batch of its outputs.

    With the batch means of the per-example log-likelihoods and of the
    dynamic object-part relations' `dynamic_l2`, and the sparsity terms of
    `keras_capsules.ops.capsule_sparsity` (l2 on the object presences,
    the "prior" ones; entropy on the share of the parts each object
    explains, the "posterior" ones):

        - image log-likelihood
        - part_likelihood_weight * part log-likelihood
        + dynamic_l2_weight * dynamic_l2
        + prior_within_sparsity_weight * prior within
        + prior_between_sparsity_weight * prior between
        + posterior_within_sparsity_weight * posterior within
        - posterior_between_sparsity_weight * posterior between

    the official objective with its weights as defaults. The sparsity
    terms are taken over the batch, so the loss is one number per batch,
    not a mean of per-example losses. With `labels`, the cross-entropies
    of the two linear probes (`"prior_logits"`, `"posterior_logits"`) are
    added; their inputs are held out of the gradient in the model, so the
    labels train nothing else. Computed in float32 (float64 for float64
    outputs).

    Args:
        outputs: The dict `StackedCapsuleAutoencoder` returns.
        labels: Optional integer or one-hot labels `(batch,)` or
            `(batch, num_classes)`, for the probes. Defaults to `None`.
        part_likelihood_weight: Non-negative float. Defaults to `1.0`.
        dynamic_l2_weight: Non-negative float. Defaults to `10.0`.
        prior_within_sparsity_weight: Non-negative float. Defaults to
            `2.0`.
        prior_between_sparsity_weight: Non-negative float. Defaults to
            `0.35`.
        posterior_within_sparsity_weight: Non-negative float. Defaults to
            `0.7`.
        posterior_between_sparsity_weight: Non-negative float. Defaults to
            `0.2`.
        num_classes: Positive int, the classes the prior sparsity targets
            (`num_object_capsules / num_classes` per example). Defaults to
            `10`.
        prior_within_example_constant: Optional positive float replacing
            that per-example target. Defaults to `None`.
        return_terms: Whether to return the terms too. Defaults to
            `False`.

    Returns:
        A scalar; with `return_terms=True`, `(loss, terms)`, `terms` a dict
        of every term above (named without `_weight`, the likelihoods as
        `"image_log_likelihood"` and `"part_log_likelihood"`) and, with
        labels, `"prior_probe_loss"`, `"posterior_probe_loss"`,
        `"prior_probe_accuracy"` and `"posterior_probe_accuracy"`.

    Raises:
        ValueError: If `outputs` lacks one of the model's outputs the loss
            reads, or a weight is negative.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> model = keras_capsules.models.StackedCapsuleAutoencoder(
    ...     image_shape=(28, 28, 1), num_parts=8, num_object_capsules=4,
    ...     object_capsule_dim=16,
    ... )
    >>> outputs = model(np.zeros((2, 28, 28, 1), "float32"))
    >>> loss = keras_capsules.losses.stacked_capsule_autoencoder_loss(
    ...     outputs, labels=np.array([3, 5])
    ... )
    >>> tuple(loss.shape)
    ()
    """
    arguments = locals()
    weights, num_classes, constant = _check_settings(
        {name: arguments[name] for name in DEFAULT_WEIGHTS},
        num_classes,
        prior_within_example_constant,
    )
    needed = _NEEDED + (_PROBES if labels is not None else ())
    if not isinstance(outputs, dict) or any(k not in outputs for k in needed):
        keys = sorted(outputs) if isinstance(outputs, dict) else type(outputs)
        raise ValueError(
            "Argument outputs must be the dict of outputs of a "
            f"StackedCapsuleAutoencoder, with {', '.join(needed)}. "
            f"Received: outputs={keys}"
        )
    dtype = keras.backend.standardize_dtype(
        ops.convert_to_tensor(outputs["image_log_likelihood"]).dtype
    )
    dtype = "float64" if dtype == "float64" else "float32"
    out = {key: ops.cast(outputs[key], dtype) for key in needed}
    image_ll = ops.mean(out["image_log_likelihood"])
    part_ll = ops.mean(out["part_log_likelihood"])
    dynamic_l2 = ops.mean(out["dynamic_l2"])
    prior_within, prior_between = capsule_sparsity(
        out["object_presence"],
        "l2",
        num_classes=num_classes,
        within_example_constant=constant,
    )
    # The share of the parts each object explains, the official
    # `/ n_points`.
    num_parts = out["part_presence"].shape[-1]
    posterior_within, posterior_between = capsule_sparsity(
        out["object_posterior_presence"] / num_parts, "entropy"
    )
    loss = (
        -image_ll
        - weights["part_likelihood_weight"] * part_ll
        + weights["dynamic_l2_weight"] * dynamic_l2
        + weights["prior_within_sparsity_weight"] * prior_within
        + weights["prior_between_sparsity_weight"] * prior_between
        + weights["posterior_within_sparsity_weight"] * posterior_within
        - weights["posterior_between_sparsity_weight"] * posterior_between
    )
    terms = dict(
        zip(
            TERMS,
            (
                image_ll,
                part_ll,
                dynamic_l2,
                prior_within,
                prior_between,
                posterior_within,
                posterior_between,
            ),
        )
    )
    if labels is not None:
        labels = _class_indices(labels, num_classes)
        for kind in ("prior", "posterior"):
            logits = out[f"{kind}_logits"]
            probe_loss = ops.mean(
                keras.losses.sparse_categorical_crossentropy(
                    labels, logits, from_logits=True
                )
            )
            loss = loss + probe_loss
            terms[f"{kind}_probe_loss"] = probe_loss
            terms[f"{kind}_probe_accuracy"] = ops.mean(
                ops.cast(ops.argmax(logits, axis=-1) == labels, dtype)
            )
    if return_terms:
        return loss, terms
    return loss


@keras.saving.register_keras_serializable(package="keras_capsules")
class StackedCapsuleAutoencoderLoss(keras.losses.Loss):
    """The Stacked Capsule Autoencoder's loss, for `compile(loss=...)`.

    `keras_capsules.losses.stacked_capsule_autoencoder_loss` with its
    settings held: `loss(y_true, y_pred)` takes the labels (or `None`)
    and the model's dict of outputs, and returns one number per batch (the
    sparsity terms are taken over the batch, so there is no per-example
    loss to weight: `sample_weight` is refused). The model's
    `compile()` uses the official weights, the defaults; to change them,
    pass an instance with others. `StackedCapsuleAutoencoder` logs every
    term that `terms` returns.

    Args:
        part_likelihood_weight: Non-negative float. Defaults to `1.0`.
        dynamic_l2_weight: Non-negative float. Defaults to `10.0`.
        prior_within_sparsity_weight: Non-negative float. Defaults to
            `2.0`.
        prior_between_sparsity_weight: Non-negative float. Defaults to
            `0.35`.
        posterior_within_sparsity_weight: Non-negative float. Defaults to
            `0.7`.
        posterior_between_sparsity_weight: Non-negative float. Defaults to
            `0.2`.
        num_classes: Positive int. Defaults to `10`.
        prior_within_example_constant: Optional positive float. Defaults
            to `None` (`num_object_capsules / num_classes`).
        name: Optional name. Defaults to
            `"stacked_capsule_autoencoder_loss"`.
        dtype: Optional dtype of the loss. Defaults to `None`.

    Example:

    >>> import keras_capsules
    >>> loss = keras_capsules.losses.StackedCapsuleAutoencoderLoss(
    ...     dynamic_l2_weight=5.0
    ... )
    >>> loss.get_config()["dynamic_l2_weight"]
    5.0

    `model.compile(loss=loss)` trains a `StackedCapsuleAutoencoder` with
    it.
    """

    def __init__(
        self,
        part_likelihood_weight=1.0,
        dynamic_l2_weight=10.0,
        prior_within_sparsity_weight=2.0,
        prior_between_sparsity_weight=0.35,
        posterior_within_sparsity_weight=0.7,
        posterior_between_sparsity_weight=0.2,
        num_classes=10,
        prior_within_example_constant=None,
        name="stacked_capsule_autoencoder_loss",
        dtype=None,
    ):
        super().__init__(name=name, reduction="sum", dtype=dtype)
        arguments = locals()
        weights, num_classes, constant = _check_settings(
            {name: arguments[name] for name in DEFAULT_WEIGHTS},
            num_classes,
            prior_within_example_constant,
        )
        self.term_weights = weights
        self.num_classes = num_classes
        self.prior_within_example_constant = constant

    def terms(self, y_true, y_pred):
        """Returns `(loss, terms)`: the loss and the value of every term
        (see `stacked_capsule_autoencoder_loss`)."""
        return stacked_capsule_autoencoder_loss(
            y_pred,
            y_true,
            **self.term_weights,
            num_classes=self.num_classes,
            prior_within_example_constant=self.prior_within_example_constant,
            return_terms=True,
        )

    def __call__(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:
            raise ValueError(
                "StackedCapsuleAutoencoderLoss is one number per batch "
                "(its sparsity terms are taken over the batch) and takes no "
                "sample weights. Received: sample_weight="
                f"{type(sample_weight).__name__}"
            )
        return self.terms(y_true, y_pred)[0]

    def call(self, y_true, y_pred):
        return self.terms(y_true, y_pred)[0]

    def get_config(self):
        config = super().get_config()
        # The reduction is fixed: the loss is one number per batch.
        del config["reduction"]
        return {
            **config,
            **self.term_weights,
            "num_classes": self.num_classes,
            "prior_within_example_constant": (
                self.prior_within_example_constant
            ),
        }
