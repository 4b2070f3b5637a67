"""The two likelihoods of Stacked Capsule Autoencoders: images as mixtures
of templates, and part poses as mixtures of object-capsule votes."""

import math

from keras import ops

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_positive_number
from keras_capsules.ops._dtypes import compute_dtypes
from keras_capsules.ops._logs import safe_log

# The official dummy component of the part-pose mixture: its density and
# its mixing logit are both log(0.01).
DUMMY_LOG_VALUE = -2.0 * math.log(10.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _normal_log_prob(x, mean, scale):
    z = (x - mean) / scale
    return -0.5 * z * z - ops.log(scale) - _HALF_LOG_2PI


def _check_template_mixture(templates, template_logits, presence):
    if len(templates.shape) != 5:
        raise ValueError(
            "Argument templates must have shape (batch, num_templates, "
            "height, width, channels). "
            f"Received: templates.shape={tuple(templates.shape)}"
        )
    if len(template_logits.shape) != 5 or tuple(
        template_logits.shape[:4]
    ) != tuple(templates.shape[:4]):
        raise ValueError(
            "Argument template_logits must have shape (batch, "
            "num_templates, height, width, 1 or channels), like templates "
            f"{tuple(templates.shape)}. "
            f"Received: template_logits.shape={tuple(template_logits.shape)}"
        )
    if tuple(presence.shape) != tuple(templates.shape[:2]):
        raise ValueError(
            "Argument presence must have shape (batch, num_templates) = "
            f"{tuple(templates.shape[:2])}. "
            f"Received: presence.shape={tuple(presence.shape)}"
        )


def _template_mixture(
    templates, template_logits, presence, background, background_logit
):
    """The components (templates, then the background) and the log mixing
    probabilities of every pixel, in the compute dtype."""
    templates = ops.convert_to_tensor(templates)
    template_logits = ops.convert_to_tensor(template_logits)
    presence = ops.convert_to_tensor(presence)
    _check_template_mixture(templates, template_logits, presence)
    dtype, compute_dtype = compute_dtypes(templates)
    templates = ops.cast(templates, compute_dtype)
    template_logits = ops.cast(template_logits, compute_dtype)
    presence = ops.cast(presence, compute_dtype)
    background = ops.cast(background, compute_dtype)
    background_logit = ops.cast(background_logit, compute_dtype)

    background = ops.zeros_like(templates[:, :1]) + background
    components = ops.concatenate([templates, background], axis=1)
    background_logit = ops.zeros_like(template_logits[:, :1]) + background_logit
    logits = ops.concatenate([template_logits, background_logit], axis=1)
    presence = ops.concatenate([presence, ops.ones_like(presence[:, :1])], 1)
    logits = logits + safe_log(presence)[:, :, None, None, None]
    log_mixing = logits - ops.logsumexp(logits, axis=1, keepdims=True)
    return components, log_mixing, dtype


def template_mixture_log_likelihood(
    images,
    templates,
    template_logits,
    presence,
    background,
    background_logit,
    scale=1.0,
):
    """Per-pixel log-likelihood of images under a mixture of templates.

    The image model of the part capsule autoencoder: every pixel is a
    mixture of Gaussians with standard deviation `scale`, one component per
    transformed template (its mean the template's value at that pixel) and
    one for the background (mean `background`). The mixing logits are
    the templates' own per-pixel logits (the official code's warped
    "alpha" templates) plus the log of the part's presence; the background
    has logit `background_logit` and presence 1:

        log p(x) = logsumexp_k [ log N(x; T_k, scale^2) + log pi_k ],
        pi_k = softmax_k(template_logits_k + log presence_k).

    The log of a presence below `1e-16` is taken as `-1e8`, as in the
    official code, so absent parts drop out without NaNs.

    Args:
        images: Tensor of shape `(batch, height, width, channels)`.
        templates: Tensor of shape
            `(batch, num_templates, height, width, channels)`, the templates
            placed on the canvas (see `keras_capsules.ops.warp_templates`).
        template_logits: Tensor of shape
            `(batch, num_templates, height, width, 1)` (or `channels`), the
            mixing logits of each template at each pixel.
        presence: Tensor of shape `(batch, num_templates)`, the presence
            probabilities of the parts.
        background: Scalar tensor (or broadcastable to
            `(batch, 1, height, width, channels)`), the background value.
        background_logit: Scalar tensor (or broadcastable to
            `(batch, 1, height, width, 1)`), the background's mixing logit.
        scale: Positive float, the standard deviation of every component.
            Defaults to `1.0`, the official value.

    Returns:
        A tensor of shape `(batch, height, width, channels)`, the
        log-likelihood of every pixel. The official reconstruction term is
        its sum over pixels, averaged over the batch.

    Raises:
        ValueError: If the shapes do not fit together or `scale` is not
            positive.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> images = np.zeros((2, 8, 8, 1), "float32")
    >>> templates = np.zeros((2, 3, 8, 8, 1), "float32")
    >>> log_likelihood = keras_capsules.ops.template_mixture_log_likelihood(
    ...     images, templates, templates, np.ones((2, 3), "float32"),
    ...     background=0.0, background_logit=0.0,
    ... )
    >>> tuple(log_likelihood.shape)
    (2, 8, 8, 1)

    Reference:
    - [The official TensorFlow code](
      https://github.com/akosiorek/stacked_capsule_autoencoders)
      (`capsules/primary.py`, `TemplateBasedImageDecoder`)
    """
    check_positive_number(scale, "scale")
    components, log_mixing, dtype = _template_mixture(
        templates, template_logits, presence, background, background_logit
    )
    images = ops.cast(ops.convert_to_tensor(images), components.dtype)
    if len(images.shape) != 4 or tuple(images.shape[1:]) != tuple(
        components.shape[2:]
    ):
        raise ValueError(
            "Argument images must have shape (batch, height, width, "
            f"channels) = (batch,) + {tuple(components.shape[2:])}. "
            f"Received: images.shape={tuple(images.shape)}"
        )
    scale = ops.convert_to_tensor(float(scale), dtype=components.dtype)
    log_prob = _normal_log_prob(images[:, None], components, scale)
    return ops.cast(ops.logsumexp(log_prob + log_mixing, axis=1), dtype)


def template_mixture_mode(
    templates,
    template_logits,
    presence,
    background,
    background_logit,
    return_components=False,
):
    """The reconstruction of the template mixture: at every pixel, the
    value of its most probable component.

    Takes the arguments of
    `keras_capsules.ops.template_mixture_log_likelihood` (without the
    images and the scale) and returns, for every pixel, the mean of the
    component (template or background) with the largest mixing
    probability there, the first one on ties. This is the official code's
    reconstruction (`pdf.mode()`); it has no gradient with respect to the
    mixing logits.

    Args:
        templates: Tensor of shape
            `(batch, num_templates, height, width, channels)`.
        template_logits: Tensor of shape
            `(batch, num_templates, height, width, 1)` (or `channels`).
        presence: Tensor of shape `(batch, num_templates)`.
        background: Scalar tensor, the background value.
        background_logit: Scalar tensor, the background's mixing logit.
        return_components: Boolean, whether to also return which
            component won each pixel. Defaults to `False`.

    Returns:
        A tensor of shape `(batch, height, width, channels)`. With
        `return_components=True`, a tuple whose second tensor holds, for
        every pixel, the index of its component: `0` to
        `num_templates - 1` for a template, `num_templates` for the
        background; int32, of shape `(batch, height, width, 1)` (or
        `channels` for per-channel logits).

    Raises:
        ValueError: If the shapes do not fit together.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> templates = np.ones((2, 3, 8, 8, 1), "float32")
    >>> image = keras_capsules.ops.template_mixture_mode(
    ...     templates, np.zeros_like(templates), np.ones((2, 3), "float32"),
    ...     background=0.0, background_logit=-1.0,
    ... )
    >>> float(np.asarray(image).min())
    1.0
    """
    components, log_mixing, dtype = _template_mixture(
        templates, template_logits, presence, background, background_logit
    )
    check_bool(return_components, "return_components")
    winner = ops.argmax(log_mixing, axis=1)
    mask = ops.one_hot(winner, components.shape[1], axis=1)
    mask = ops.cast(mask, components.dtype)
    mode = ops.cast(ops.sum(mask * components, axis=1), dtype)
    if return_components:
        return mode, ops.cast(winner, "int32")
    return mode


def _check_part_mixture(part_poses, votes, vote_scales, vote_presence):
    if len(part_poses.shape) != 3:
        raise ValueError(
            "Argument part_poses must have shape (batch, num_parts, dim). "
            f"Received: part_poses.shape={tuple(part_poses.shape)}"
        )
    batch, num_parts, dim = tuple(part_poses.shape)
    if (
        len(votes.shape) != 4
        or tuple(votes.shape[2:]) != (num_parts, dim)
        or votes.shape[0] != batch
    ):
        raise ValueError(
            "Argument votes must have shape (batch, num_objects, num_parts, "
            f"dim) with (num_parts, dim) = {(num_parts, dim)}. "
            f"Received: votes.shape={tuple(votes.shape)}"
        )
    for name, value in (
        ("vote_scales", vote_scales),
        ("vote_presence", vote_presence),
    ):
        if tuple(value.shape) != tuple(votes.shape[:3]):
            raise ValueError(
                f"Argument {name} must have shape (batch, num_objects, "
                f"num_parts) = {tuple(votes.shape[:3])}. "
                f"Received: {name}.shape={tuple(value.shape)}"
            )


def part_pose_log_likelihood(
    part_poses,
    votes,
    vote_scales,
    vote_presence,
    part_presence=None,
    normalize_mixing=False,
    return_winners=False,
):
    """Log-likelihood of part poses under the object capsules' votes.

    The likelihood of the object capsule autoencoder. Object capsule `k`
    votes `votes[k, m]` for the pose of part `m`, with isotropic standard
    deviation `vote_scales[k, m]` and presence `vote_presence[k, m]`. Each
    part pose is a mixture over the objects and one dummy component (of
    density and mixing weight `0.01`, which explains parts no object
    claims):

        l[k, m] = log vote_presence[k, m]
                  + sum_d log N(x[m, d]; votes[k, m, d], vote_scales[k, m]^2)
        log p(x_m) = logsumexp_k l[k, m]    (k over the objects and dummy)

    and the log-likelihood of an example is the sum over its parts of
    `log p(x_m)`, each weighted by `part_presence[m]`.

    As in the official code the mixing logits `log vote_presence` are not
    normalised over the objects (the paper divides by their sum), so the
    result is not a normalised log-density; `normalize_mixing=True`
    subtracts their log-sum-exp, as the paper's equation does. The
    posterior over the objects is the same either way: the softmax of
    `l[k, m]` over the objects and the dummy, returned without the dummy's
    share. Presences below `1e-16` give logits of `-1e8`.

    Args:
        part_poses: Tensor of shape `(batch, num_parts, dim)`, the parts'
            poses (6 affine parameters in the official model).
        votes: Tensor of shape `(batch, num_objects, num_parts, dim)`.
        vote_scales: Tensor of shape `(batch, num_objects, num_parts)`,
            positive.
        vote_presence: Tensor of shape `(batch, num_objects, num_parts)`,
            the vote presence probabilities.
        part_presence: Optional tensor of shape `(batch, num_parts)`,
            weighting each part's log-likelihood. Defaults to `None`
            (weight 1).
        normalize_mixing: Boolean, whether to normalise the mixing
            probabilities over the objects and the dummy. Defaults to
            `False`, the official code.
        return_winners: Boolean, whether to also return, for every part,
            the vote of the object (dummy excluded) with the largest
            posterior. Defaults to `False`.

    Returns:
        A tuple `(log_likelihood, posterior)`: the per-example
        log-likelihood, of shape `(batch,)`, and the posterior probability
        that each part came from each object, of shape
        `(batch, num_parts, num_objects)`. With `return_winners=True`, a
        third tensor of shape `(batch, num_parts, dim)`, the winning votes.

    Raises:
        ValueError: If the shapes do not fit together.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> parts = np.zeros((2, 40, 6), "float32")
    >>> votes = np.zeros((2, 32, 40, 6), "float32")
    >>> ones = np.ones((2, 32, 40), "float32")
    >>> log_likelihood, posterior = keras_capsules.ops.part_pose_log_likelihood(
    ...     parts, votes, ones, 0.5 * ones
    ... )
    >>> tuple(log_likelihood.shape), tuple(posterior.shape)
    ((2,), (2, 40, 32))

    Reference:
    - [The official TensorFlow code](
      https://github.com/akosiorek/stacked_capsule_autoencoders)
      (`capsules/capsule.py`, `CapsuleLikelihood`)
    """
    check_bool(normalize_mixing, "normalize_mixing")
    check_bool(return_winners, "return_winners")
    part_poses = ops.convert_to_tensor(part_poses)
    votes = ops.convert_to_tensor(votes)
    vote_scales = ops.convert_to_tensor(vote_scales)
    vote_presence = ops.convert_to_tensor(vote_presence)
    _check_part_mixture(part_poses, votes, vote_scales, vote_presence)
    dtype, compute_dtype = compute_dtypes(votes)
    part_poses = ops.cast(part_poses, compute_dtype)
    votes = ops.cast(votes, compute_dtype)
    vote_scales = ops.cast(vote_scales, compute_dtype)
    vote_presence = ops.cast(vote_presence, compute_dtype)

    log_prob = ops.sum(
        _normal_log_prob(part_poses[:, None], votes, vote_scales[..., None]),
        axis=-1,
    )
    dummy = ops.zeros_like(log_prob[:, :1]) + DUMMY_LOG_VALUE
    log_prob = ops.concatenate([log_prob, dummy], axis=1)
    logits = ops.concatenate([safe_log(vote_presence), dummy], axis=1)
    if normalize_mixing:
        logits = logits - ops.logsumexp(logits, axis=1, keepdims=True)
    joint = logits + log_prob
    per_part = ops.logsumexp(joint, axis=1)
    if part_presence is not None:
        part_presence = ops.cast(part_presence, compute_dtype)
        if tuple(part_presence.shape) != tuple(part_poses.shape[:2]):
            raise ValueError(
                "Argument part_presence must have shape (batch, num_parts) "
                f"= {tuple(part_poses.shape[:2])}. "
                f"Received: part_presence.shape={tuple(part_presence.shape)}"
            )
        per_part = per_part * part_presence
    log_likelihood = ops.sum(per_part, axis=1)
    posterior = ops.softmax(joint, axis=1)[:, :-1]
    posterior = ops.transpose(posterior, (0, 2, 1))
    outputs = (ops.cast(log_likelihood, dtype), ops.cast(posterior, dtype))
    if not return_winners:
        return outputs
    winner = ops.argmax(joint[:, :-1], axis=1)
    mask = ops.one_hot(winner, votes.shape[1], axis=1)
    winners = ops.sum(ops.cast(mask, votes.dtype)[..., None] * votes, axis=1)
    return outputs + (ops.cast(winners, dtype),)
