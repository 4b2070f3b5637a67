"""Configs of `StackedCapsuleAutoencoder` saved before its release, in
today's names."""

from keras_capsules.losses.stacked_capsule_autoencoder_loss import (
    DEFAULT_WEIGHTS,
)

# Arguments of the model before its release, and what they became.
_RENAMED = {
    "num_objects": "num_object_capsules",
    "object_dim": "object_capsule_dim",
}
_RENAMED_VALUES = {
    "part_head_layout": {"official": "interleaved"},
    "presence_masking": {"official": "most_present"},
}
_MOVED_TO_LOSS = tuple(DEFAULT_WEIGHTS) + ("prior_within_example_constant",)


def upgrade_config(config):
    """A config saved before the release in today's names (CHANGELOG.md).

    Raises:
        ValueError: If it sets a loss weight away from its default: the
            weights moved to `losses.StackedCapsuleAutoencoderLoss`.
    """
    config = dict(config)
    for old, new in _RENAMED.items():
        if old in config and new not in config:
            config[new] = config.pop(old)
    for name, values in _RENAMED_VALUES.items():
        if config.get(name) in values:
            config[name] = values[config[name]]
    # The official evaluation's noise is no longer on by default: a saved
    # `noise_at_inference` gives a deterministic model.
    config.pop("noise_at_inference", None)
    moved = {}
    for name in _MOVED_TO_LOSS:
        if name in config:
            value = config.pop(name)
            if value != DEFAULT_WEIGHTS.get(name):
                moved[name] = value
    if moved:
        settings = ", ".join(f"{k}={v!r}" for k, v in moved.items())
        raise ValueError(
            "The weights of the loss terms and prior_within_example_constant "
            "are arguments of keras_capsules.losses."
            "StackedCapsuleAutoencoderLoss, passed to compile(loss=...), no "
            "longer of the model; this saved model sets "
            f"{', '.join(moved)}. Build the model without them and compile "
            f"it with StackedCapsuleAutoencoderLoss({settings}). "
            f"Received: {settings}"
        )
    return config
