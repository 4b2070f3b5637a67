"""The object capsule decoder of Stacked Capsule Autoencoders."""

import keras
from keras import ops

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_positive_int
from keras_capsules.initializers.fan_in_truncated_normal import (
    FanInTruncatedNormal,
)
from keras_capsules.layers._presence_noise import check_noise_arguments
from keras_capsules.layers._presence_noise import presence_noise
from keras_capsules.layers._presence_noise import save_seed_state
from keras_capsules.layers._presence_noise import without_seed_state
from keras_capsules.ops._dtypes import matmul
from keras_capsules.ops.poses import geometric_transform

_POSE_DIM = 6


@keras.saving.register_keras_serializable(package="keras_capsules")
class ObjectCapsuleDecoder(keras.layers.Layer):
    """Turns object capsules into votes for the part poses.

    The decoder of the object capsule autoencoder of Stacked Capsule
    Autoencoders, as the official code builds it. Each object capsule `k`
    has its own two-layer MLP (`hidden_dim` ReLU units, then
    `num_params` outputs) that maps its feature vector to capsule
    parameters, and, after a constant 1 is appended to them, its own
    second MLP (`hidden_dim` ReLU units, then an output layer without a
    bias) that gives the object-viewer relation `OV_k` (6 pose parameters
    plus a learned bias); the dynamic part of each object-part relation
    `OP_km`, added to a learned static part; a capsule presence logit and
    one presence logit per vote (plus learned biases); and a scale logit
    per vote (plus a learned bias).

    Poses go through `keras_capsules.ops.geometric_transform`. The vote of
    object `k` for part `m` is the affine transform `OV_k OP_km`; its
    presence is `sigmoid(capsule logit) sigmoid(vote logit)`, its scale
    `softplus(logit + 0.5) + 0.01`. The capsule's presence is the largest
    presence of its votes (the official `caps_presence_prob`), and
    `dynamic_l2` is half the squared norm of the dynamic parts.

    **Presence noise**, on the capsule and vote presence logits, as
    `PartCapsuleEncoder`'s: uniform of width `noise_scale` in training;
    outside training none, unless `inference_noise_seed` is an int (then
    drawn from that seed alone, the same at every call).

    The official layer also creates a `dummy_vote` variable, of the shape
    of one capsule's votes, for a reconstruction that the official MNIST
    model does not use; it is created here too, so that the parameter
    count equals the official one.

    Paper: [Stacked Capsule Autoencoders](https://arxiv.org/abs/1906.06818)
    (Kosiorek, Sabour, Teh & Hinton, NeurIPS 2019).

    Args:
        num_parts: Positive int, the number of part capsules (one vote
            each). Defaults to `40`.
        num_params: Positive int, the size of the capsule parameters.
            Defaults to `32`.
        hidden_dim: Positive int, the hidden units of both MLPs. Defaults
            to `128`.
        noise_scale: Non-negative float. Defaults to `4.0`.
        inference_noise_seed: Optional int `>= 0`. Defaults to `None`.
        similarity: Boolean, whether the relations are similarity
            transforms. Defaults to `False`.
        seed: Optional int, the seed of the training noise. Defaults to
            `None`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Input shape:
        `(batch, num_object_capsules, object_capsule_dim)`.

    Output shape:
        A dict of tensors: `"votes"` `(batch, num_object_capsules,
        num_parts, 6)`, `"vote_scales"` and `"vote_presence"`
        `(batch, num_object_capsules, num_parts)`, `"presence"`
        `(batch, num_object_capsules)`, `"poses"` `(batch,
        num_object_capsules, 6)` (the object-viewer transforms) and
        `"dynamic_l2"` `(batch,)`.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> decoder = keras_capsules.layers.ObjectCapsuleDecoder()
    >>> out = decoder(np.zeros((2, 32, 256), "float32"))
    >>> tuple(out["votes"].shape)
    (2, 32, 40, 6)

    Reference:
    - [The official TensorFlow code](
      https://github.com/akosiorek/stacked_capsule_autoencoders)
      (`capsules/capsule.py`, `CapsuleLayer`; `capsules/models/scae.py`,
      `ImageCapsule`)
    """

    def __init__(
        self,
        num_parts=40,
        num_params=32,
        hidden_dim=128,
        noise_scale=4.0,
        inference_noise_seed=None,
        similarity=False,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_parts = check_positive_int(num_parts, "num_parts")
        self.num_params = check_positive_int(num_params, "num_params")
        self.hidden_dim = check_positive_int(hidden_dim, "hidden_dim")
        self.noise_scale, self.inference_noise_seed = check_noise_arguments(
            noise_scale, inference_noise_seed
        )
        self.similarity = check_bool(similarity, "similarity")
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.input_spec = keras.layers.InputSpec(ndim=3)

    @property
    def _num_outputs(self):
        # OP dynamic, OV, capsule presence, vote presences, vote scales.
        return self.num_parts * _POSE_DIM + _POSE_DIM + 1 + 2 * self.num_parts

    def _capsule_dense(self, name, num_objects, fan_in, units, use_bias=True):
        kernel = self.add_weight(
            name=f"{name}_kernel",
            shape=(num_objects, fan_in, units),
            initializer=FanInTruncatedNormal(fan_in),
        )
        bias = None
        if use_bias:
            bias = self.add_weight(
                name=f"{name}_bias",
                shape=(num_objects, units),
                initializer="zeros",
            )
        return kernel, bias

    def build(self, input_shape):
        num_objects, feature_dim = input_shape[1], input_shape[2]
        if num_objects is None or feature_dim is None:
            raise ValueError(
                "ObjectCapsuleDecoder needs static sizes (batch, "
                "num_objects, feature_dim). "
                f"Received: input_shape={tuple(input_shape)}"
            )
        self.params_hidden = self._capsule_dense(
            "params_hidden", num_objects, feature_dim, self.hidden_dim
        )
        self.params_output = self._capsule_dense(
            "params_output", num_objects, self.hidden_dim, self.num_params
        )
        self.caps_hidden = self._capsule_dense(
            "caps_hidden", num_objects, self.num_params + 1, self.hidden_dim
        )
        self.caps_output = self._capsule_dense(
            "caps_output",
            num_objects,
            self.hidden_dim,
            self._num_outputs,
            use_bias=False,
        )
        zeros = "zeros"
        self.pose_bias = self.add_weight(
            name="pose_bias", shape=(num_objects, _POSE_DIM), initializer=zeros
        )
        self.presence_bias = self.add_weight(
            name="presence_bias", shape=(num_objects,), initializer=zeros
        )
        self.vote_presence_bias = self.add_weight(
            name="vote_presence_bias",
            shape=(num_objects, self.num_parts),
            initializer=zeros,
        )
        self.vote_scale_bias = self.add_weight(
            name="vote_scale_bias",
            shape=(num_objects, self.num_parts),
            initializer=zeros,
        )
        self.static_relations = self.add_weight(
            name="static_relations",
            shape=(num_objects, self.num_parts, _POSE_DIM),
            initializer="glorot_uniform",
        )
        self.dummy_vote = self.add_weight(
            name="dummy_vote",
            shape=(self.num_parts, _POSE_DIM),
            initializer="glorot_uniform",
        )

    @staticmethod
    def _apply(x, weights):
        kernel, bias = weights
        y = ops.einsum("bkd,kdu->bku", x, kernel)
        return y if bias is None else y + bias

    def call(self, inputs, training=None):
        batch, num_objects = ops.shape(inputs)[0], inputs.shape[1]
        params = self._apply(
            ops.relu(self._apply(inputs, self.params_hidden)),
            self.params_output,
        )
        params = ops.concatenate([params, ops.ones_like(params[..., :1])], -1)
        outputs = self._apply(
            ops.relu(self._apply(params, self.caps_hidden)), self.caps_output
        )
        num_relations = self.num_parts * _POSE_DIM
        dynamic = ops.reshape(
            outputs[..., :num_relations],
            (batch, num_objects, self.num_parts, _POSE_DIM),
        )
        start = num_relations
        pose = outputs[..., start : start + _POSE_DIM] + self.pose_bias
        start += _POSE_DIM
        presence_logit = outputs[..., start] + self.presence_bias
        start += 1
        vote_logits = (
            outputs[..., start : start + self.num_parts]
            + self.vote_presence_bias
        )
        start += self.num_parts
        scale_logits = outputs[..., start:] + self.vote_scale_bias
        # One draw for the capsule and the vote presence logits.
        noise = presence_noise(
            self,
            (batch, num_objects, 1 + self.num_parts),
            presence_logit.dtype,
            training,
        )
        if noise is not None:
            presence_logit = presence_logit + noise[..., 0]
            vote_logits = vote_logits + noise[..., 1:]
        object_viewer = geometric_transform(
            pose, similarity=self.similarity, as_matrix=True
        )
        object_part = geometric_transform(
            dynamic + self.static_relations,
            similarity=self.similarity,
            as_matrix=True,
        )
        votes = matmul(object_viewer[:, :, None], object_part)
        votes = ops.reshape(
            votes[..., :2, :], (batch, num_objects, self.num_parts, _POSE_DIM)
        )
        vote_presence = ops.sigmoid(presence_logit)[..., None] * ops.sigmoid(
            vote_logits
        )
        return {
            "votes": votes,
            "vote_scales": ops.softplus(scale_logits + 0.5) + 1e-2,
            "vote_presence": vote_presence,
            "presence": ops.max(vote_presence, axis=-1),
            "poses": ops.reshape(
                object_viewer[..., :2, :], (batch, num_objects, _POSE_DIM)
            ),
            "dynamic_l2": 0.5 * ops.sum(ops.square(dynamic), axis=(1, 2, 3)),
        }

    def compute_output_shape(self, input_shape):
        batch, num_objects = input_shape[0], input_shape[1]
        votes = (batch, num_objects, self.num_parts)
        return {
            "votes": votes + (_POSE_DIM,),
            "vote_scales": votes,
            "vote_presence": votes,
            "presence": (batch, num_objects),
            "poses": (batch, num_objects, _POSE_DIM),
            "dynamic_l2": (batch,),
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
                "num_params": self.num_params,
                "hidden_dim": self.hidden_dim,
                "noise_scale": self.noise_scale,
                "inference_noise_seed": self.inference_noise_seed,
                "similarity": self.similarity,
                "seed": self.seed,
            }
        )
        return config
