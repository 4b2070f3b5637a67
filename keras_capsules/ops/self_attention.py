"""Self-attention routing (Mazzia, Salvetti & Chiaberge 2021)."""

import math

from keras import ops

from keras_capsules._validation import check_broadcasts
from keras_capsules._validation import check_option
from keras_capsules._validation import check_votes_rank
from keras_capsules.ops._dtypes import compute_dtypes
from keras_capsules.ops._softmax import softmax
from keras_capsules.ops.squash import FORMS
from keras_capsules.ops.squash import squash


def self_attention_routing(
    votes, prior=None, squash_form="exponential", return_coupling=False
):
    """Routes votes to output capsules in one pass, by self-attention.

    The routing of Efficient-CapsNet. Every input capsule `i` casts a vote
    `u[i, j]` for every output capsule `j` (in the paper
    `u[i, j] = W[i, j] u_i`). With `d` the dimension of the votes:

    - the agreement of each vote with the sum of all the votes for the
      same parent, itself included, scaled like dot-product attention:
      `a[i, j] = u[i, j] . sum_k u[k, j] / sqrt(d)`;
    - coupling coefficients by a softmax over the parents:
      `c[i, j] = exp(a[i, j]) / sum_m exp(a[i, m])`;
    - an optional learned prior `b[i, j]` added to them after the softmax,
      and the weighted sum over the children:
      `s_j = sum_i (c[i, j] + b[i, j]) u[i, j]`;
    - the squash, `v_j = squash(s_j)`, by default the exponential
      `(1 - exp(-|s_j|)) s_j / |s_j|` of the paper.

    `a[i, j]` is the row sum of the paper's self-attention matrix
    `A_j = U_j U_j^T / sqrt(d)` over the `num_in` votes `U_j` for parent
    `j`; it is computed from the sum of the votes, so the
    `num_in x num_in` matrix is never formed. There are no iterations.

    Where the paper and the authors' code (`EscVM/Efficient-CapsNet`,
    which produced the published numbers) differ, this op follows the
    code: the scale is the square root of the dimension of the votes
    (the output capsules; the paper writes that of the input capsules),
    and the prior is added after the softmax, not to its logits, so the
    coefficients `c + b` need not sum to 1.

    The routing maths runs in `float32` for half-precision votes (and in
    the votes' own dtype otherwise); the results are cast back to the
    votes' dtype. The softmax subtracts the maximum logit first and the
    squash's norm is `sqrt(|s|^2 + epsilon)`, so zero, identical and very
    large votes all stay finite.

    Paper: [Efficient-CapsNet: capsule network with self-attention
    routing](https://doi.org/10.1038/s41598-021-93977-0) (Mazzia,
    Salvetti & Chiaberge, Scientific Reports 2021).

    Args:
        votes: Tensor of shape `(..., num_in, num_out, dim)`: the votes of
            every input capsule for every output capsule, with any number
            of leading (batch) dimensions.
        prior: Optional tensor broadcastable to `(num_in, num_out)`, added
            to the coupling coefficients after the softmax (the paper's
            learned "log priors", zeros at initialisation). Defaults to
            `None`.
        squash_form: `"exponential"` (the paper) or `"rational"` (Sabour
            et al.), passed to `keras_capsules.ops.squash` as `squash_form`.
            Defaults to `"exponential"`.
        return_coupling: Boolean, whether to also return the coefficients
            `c + b` that weighted the votes. Defaults to `False`.

    Returns:
        The output capsules, a tensor of shape `(..., num_out, dim)`. With
        `return_coupling=True`, a tuple `(outputs, coupling)` where
        `coupling` has shape `(..., num_in, num_out)`.

    Raises:
        ValueError: If `votes` has rank below 3, if `prior` does not
            broadcast to `(num_in, num_out)`, or if `squash_form` is
            unknown.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> votes = np.random.rand(2, 16, 10, 16).astype("float32")
    >>> outputs = keras_capsules.ops.self_attention_routing(votes)
    >>> tuple(outputs.shape)
    (2, 10, 16)

    Reference:
    - [The authors' TensorFlow code](
      https://github.com/EscVM/Efficient-CapsNet)
    """
    check_option(squash_form, "squash_form", FORMS)
    votes = ops.convert_to_tensor(votes)
    check_votes_rank(votes.shape)
    dtype, compute_dtype = compute_dtypes(votes)
    votes = ops.cast(votes, compute_dtype)
    if prior is not None:
        prior = ops.cast(prior, compute_dtype)
        check_broadcasts(
            tuple(prior.shape),
            tuple(votes.shape[-3:-1]),
            "prior",
            "the coupling coefficients (num_in, num_out) =",
        )

    total = ops.sum(votes, axis=-3)
    agreement = ops.einsum("...iod,...od->...io", votes, total)
    agreement = agreement / math.sqrt(votes.shape[-1])
    coupling = softmax(agreement, axis=-1)
    if prior is not None:
        coupling = coupling + prior
    preactivation = ops.einsum("...io,...iod->...od", coupling, votes)
    outputs = ops.cast(squash(preactivation, squash_form=squash_form), dtype)
    if return_coupling:
        return outputs, ops.cast(coupling, dtype)
    return outputs
