"""How `StackedCapsuleAutoencoder` trains: its loss terms, weighted as in
the official code, the two linear probes, and the official optimizer."""

import keras
from keras import ops

from keras_capsules._validation import check_positive_int
from keras_capsules.models._base import is_auto
from keras_capsules.ops.sparsity import capsule_sparsity
from keras_capsules.optimizers.rmsprop import RMSprop

# The official run_mnist.sh: learning rate 3e-5 (constant: the flag that
# asks for a schedule has no effect), batch 128.
OFFICIAL_LEARNING_RATE = 3e-5
OFFICIAL_BATCH_SIZE = 128

# Every value the model logs, in this order.
TRACKED = (
    "image_log_likelihood",
    "part_log_likelihood",
    "dynamic_l2",
    "prior_within_sparsity",
    "prior_between_sparsity",
    "posterior_within_sparsity",
    "posterior_between_sparsity",
    "prior_probe_loss",
    "posterior_probe_loss",
    "prior_probe_accuracy",
    "posterior_probe_accuracy",
)


def class_indices(labels, num_classes):
    """Integer labels, from integer or one-hot `labels`."""
    if len(labels.shape) == 2 and labels.shape[-1] == num_classes:
        return ops.cast(ops.argmax(labels, axis=-1), "int32")
    return ops.cast(ops.reshape(labels, (-1,)), "int32")


def objective(outputs, labels, weights, num_parts, num_classes, constant):
    """Returns `(loss, values)`: the official loss on the model's
    `outputs` (and, with `labels`, the probes' cross-entropies), and the
    value of every term, keyed as in `TRACKED`.

    `weights` holds the model's six loss weights; `constant` is its
    `prior_within_example_constant`.
    """
    image_ll = ops.mean(outputs["image_log_likelihood"])
    part_ll = ops.mean(outputs["part_log_likelihood"])
    dynamic_l2 = ops.mean(outputs["dynamic_l2"])
    prior_within, prior_between = capsule_sparsity(
        outputs["object_presence"],
        "l2",
        num_classes=num_classes,
        within_example_constant=constant,
    )
    # The share of the parts each object explains, official `/ n_points`.
    posterior_within, posterior_between = capsule_sparsity(
        outputs["object_posterior_presence"] / num_parts, "entropy"
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
    values = {
        "image_log_likelihood": image_ll,
        "part_log_likelihood": part_ll,
        "dynamic_l2": dynamic_l2,
        "prior_within_sparsity": prior_within,
        "prior_between_sparsity": prior_between,
        "posterior_within_sparsity": posterior_within,
        "posterior_between_sparsity": posterior_between,
    }
    if labels is None:
        return loss, values
    labels = class_indices(labels, num_classes)
    for kind in ("prior", "posterior"):
        logits = outputs[f"{kind}_logits"]
        probe_loss = ops.mean(
            keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True
            )
        )
        loss = loss + probe_loss
        values[f"{kind}_probe_loss"] = probe_loss
        values[f"{kind}_probe_accuracy"] = ops.mean(
            ops.cast(ops.argmax(logits, axis=-1) == labels, loss.dtype)
        )
    return loss, values


class OfficialTraining:
    """The training methods of `StackedCapsuleAutoencoder`: its loss, its
    logged terms, and `compile()` with the official optimizer. Expects the
    model's sublayers, `loss_weights` and `trackers`."""

    def compute_loss(
        self, x=None, y=None, y_pred=None, sample_weight=None, training=True
    ):
        loss, values = objective(
            y_pred,
            y,
            self.loss_weights,
            self.num_parts,
            self.num_classes,
            self.prior_within_example_constant,
        )
        unused = [self.object_decoder.dummy_vote]
        if y is None:
            unused += self.prior_probe.weights + self.posterior_probe.weights
        # The official `dummy_vote`, and the probes without labels, take no
        # gradient: a zero one leaves them as they are and keeps Keras
        # from warning about missing gradients.
        loss = loss + 0.0 * sum(ops.sum(w) for w in unused)
        self._probes_trained = y is not None
        for name, value in values.items():
            self.trackers[name].update_state(value)
        for extra in self.losses:
            loss = loss + extra
        return loss

    def get_metrics_result(self):
        results = super().get_metrics_result()
        if not getattr(self, "_probes_trained", True):
            # The probes' metrics mean nothing in a run without labels.
            results = {
                name: value
                for name, value in results.items()
                if "probe" not in name
            }
        return results

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        *,
        metrics="auto",
        jit_compile="auto",
        total_steps=None,
        batch_size=OFFICIAL_BATCH_SIZE,
        **kwargs,
    ):
        """Configures the model for training, with the official optimizer.

        Args:
            optimizer: An optimizer, or `"auto"` for the official one:
                `keras_capsules.optimizers.RMSprop` with the official
                learning rate 3e-5 (constant), momentum 0.9,
                `epsilon = 1e-2 / batch_size**2` and the squared-gradient
                average started at 1, as TensorFlow 1 did. Defaults to
                `"auto"`.
            loss: Must be `"auto"` (or `None`): the model computes its own
                loss. Defaults to `"auto"`.
            metrics: `"auto"` (or `None`, or `[]`): the loss terms and
                the probes are logged by the model. Defaults to `"auto"`.
            jit_compile: Boolean or `"auto"` (XLA on TensorFlow and JAX).
                Defaults to `"auto"`.
            total_steps: Must be `None`: the official learning rate has no
                schedule. Defaults to `None`.
            batch_size: Positive int, the batch size the default
                optimizer's epsilon is set for. Defaults to `128`, the
                official batch.
            **kwargs: Other arguments of `keras.Model.compile`.

        Raises:
            ValueError: If `loss` or `metrics` is given, or `total_steps`
                is not `None`.
        """
        self._optimizer_batch_size = check_positive_int(
            batch_size, "batch_size"
        )
        if total_steps is not None:
            raise ValueError(
                "StackedCapsuleAutoencoder's official learning rate is "
                "constant, so the default optimizer takes no total_steps; "
                "pass an optimizer with a schedule instead. "
                f"Received: total_steps={total_steps}"
            )
        for name, value in (("loss", loss), ("metrics", metrics)):
            if value is not None and not is_auto(value) and value != []:
                raise ValueError(
                    "StackedCapsuleAutoencoder computes its own loss and "
                    f"logs its terms; compile() takes no {name}. "
                    f"Received: {name}={value!r}"
                )
        super().compile(
            optimizer=optimizer,
            loss=None,
            metrics=None,
            jit_compile=jit_compile,
            **kwargs,
        )

    def default_optimizer(self, total_steps=None):
        """The official optimizer (see `compile`)."""
        return RMSprop(
            OFFICIAL_LEARNING_RATE,
            rho=0.9,
            momentum=0.9,
            epsilon=1e-2
            / getattr(self, "_optimizer_batch_size", OFFICIAL_BATCH_SIZE) ** 2,
            initial_velocity=1.0,
        )

    def default_loss(self):
        """`None`: the model computes its own loss."""
        return None

    def default_metrics(self):
        """`None`: the model logs its own loss terms."""
        return None
