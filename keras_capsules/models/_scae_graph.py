"""The functional graph of `StackedCapsuleAutoencoder`: its layers joined
as the official code joins them, to the dict of outputs."""

import collections

from keras import ops

from keras_capsules.ops._dtypes import compute_dtypes
from keras_capsules.ops.mixtures import part_pose_log_likelihood
from keras_capsules.ops.mixtures import template_mixture_log_likelihood


def scae_outputs(
    images,
    part_encoder,
    template_decoder,
    object_encoder,
    object_decoder,
    probes,
    normalize_part_mixing,
):
    """The model's outputs on the symbolic `images`, from its four layers
    and its `(prior, posterior)` probes."""
    parts = part_encoder(images)
    poses, presence = parts["poses"], parts["presence"]
    # One decoder pass: its templates before warping also feed the object
    # encoder.
    image = template_decoder(poses, parts["features"])
    templates = image["source_templates"]
    if not template_decoder.colorize_templates:
        # `(1, parts, ...)` to one copy per image, exactly.
        templates = templates + ops.zeros_like(presence)[:, :, None, None, None]
    num_parts = template_decoder.num_parts
    num_values = int(
        templates.shape[2] * templates.shape[3] * templates.shape[4]
    )
    # As in the official code: poses, presences and templates reach the
    # object encoder with their gradient stopped, the special features with
    # it (in this order).
    set_inputs = ops.concatenate(
        [
            ops.stop_gradient(poses),
            ops.stop_gradient(1.0 - presence[..., None]),
            parts["features"],
            ops.stop_gradient(
                ops.reshape(templates, (-1, num_parts, num_values))
            ),
        ],
        axis=-1,
    )
    objects = object_decoder(
        object_encoder(set_inputs, ops.stop_gradient(presence))
    )
    part_log_likelihood, posterior = part_pose_log_likelihood(
        ops.stop_gradient(poses),
        objects["votes"],
        objects["vote_scales"],
        objects["vote_presence"],
        ops.stop_gradient(presence),
        normalize_mixing=normalize_part_mixing,
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
    # The per-pixel likelihoods summed in float32 under a mixed precision
    # policy (in float64 for float64).
    _, accumulation = compute_dtypes(image_log_likelihood)
    prior_probe, posterior_probe = probes
    # An ordered dict: the outputs, and the model's `layers` (where weights
    # files find each layer), follow this order rather than that of the
    # sorted keys, so that the prior probe stays the first `Dense`.
    return collections.OrderedDict(
        object_presence=objects["presence"],
        object_posterior_presence=posterior_presence,
        object_poses=objects["poses"],
        part_poses=poses,
        part_presence=presence,
        image_log_likelihood=ops.sum(
            ops.cast(image_log_likelihood, accumulation), axis=(1, 2, 3)
        ),
        part_log_likelihood=part_log_likelihood,
        dynamic_l2=objects["dynamic_l2"],
        prior_logits=prior_probe(ops.stop_gradient(objects["presence"])),
        posterior_logits=posterior_probe(ops.stop_gradient(posterior_presence)),
    )
