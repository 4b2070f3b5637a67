"""The Set Transformer object encoder of Stacked Capsule Autoencoders."""

import math

import keras
from keras import ops

from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_int
from keras_capsules.layers._linear import linear
from keras_capsules.ops._dtypes import compute_dtypes
from keras_capsules.ops._dtypes import matmul

PRESENCE_MASKINGS = ("most_present", "log")
# The official penalty of an absent element, and the logit of the keys
# it leaves no weight.
_PRESENCE_PENALTY = 1e32
_DROPPED_LOGIT = -1e30
# Sonnet 1's LayerNorm epsilon.
_LAYER_NORM_EPSILON = 1e-5


def _most_present_masking(logits, key_presence, scale):
    """The official `softmax((q.k - (1 - p) 1e32) / scale)`, in a form
    without the 1e32 in the softmax.

    In float32 the penalty swamps the dot products: only the keys of the
    smallest penalty `(1 - p) 1e32 / scale` (as float32 rounds it) keep any
    weight, all others get exactly 0. Among those, if `p` is exactly 1 the
    penalty is 0 and the dot products count as usual; otherwise they are
    absorbed by the penalty, the weights are uniform, and only the
    gradient still sees the dot products (with derivative 1). Written out
    like this it gives those values, and the gradients with respect to the
    queries, keys and values, without numbers of 1e31 in the softmax,
    which XLA's fused CPU kernels round differently in the max and in the
    exponential (an overflow to NaN). `logits` are already divided by
    `scale`.
    """
    penalty = (1.0 - key_presence) * _PRESENCE_PENALTY / scale
    least = ops.min(penalty, axis=-1, keepdims=True)
    absorbed = ops.broadcast_to(least > 0, ops.shape(logits))
    logits = ops.where(absorbed, logits - ops.stop_gradient(logits), logits)
    kept = ops.broadcast_to(penalty == least, ops.shape(logits))
    return ops.where(kept, logits, ops.full_like(logits, _DROPPED_LOGIT))


class _Attention(keras.layers.Layer):
    """Multi-head attention as the official code writes it: per head, a
    linear map of the queries, keys and values to `ceil(dim / num_heads)`
    units each; scaled dot products, penalised by the presence of the
    keys; a linear map of the concatenated heads back to the values'
    size. Computed in float32 at least (the penalty overflows float16)."""

    def __init__(self, num_heads, presence_masking, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.presence_masking = presence_masking

    def build(self, queries_shape, keys_shape, values_shape):
        def maps(shape, kind):
            size = shape[-1]
            units = math.ceil(size / self.num_heads)
            layers = []
            for head in range(self.num_heads):
                layer = linear(units, f"{kind}_{head}", dtype=self.dtype_policy)
                layer.build(shape)
                layers.append(layer)
            return layers, units

        self.query_maps, _ = maps(queries_shape, "query")
        self.key_maps, _ = maps(keys_shape, "key")
        self.value_maps, units = maps(values_shape, "value")
        self.output_map = linear(
            values_shape[-1], "output", dtype=self.dtype_policy
        )
        self.output_map.build(
            tuple(queries_shape[:-1]) + (units * self.num_heads,)
        )

    def call(self, queries, keys, values, presence=None):
        heads = []
        for query_map, key_map, value_map in zip(
            self.query_maps, self.key_maps, self.value_maps
        ):
            q, k, v = query_map(queries), key_map(keys), value_map(values)
            dtype, compute_dtype = compute_dtypes(q)
            q, k = ops.cast(q, compute_dtype), ops.cast(k, compute_dtype)
            logits = matmul(q, ops.transpose(k, (0, 2, 1)))
            scale = math.sqrt(q.shape[-1])
            logits = logits / scale
            if presence is not None:
                key_presence = ops.cast(presence, logits.dtype)[:, None, :]
                if self.presence_masking == "most_present":
                    logits = _most_present_masking(logits, key_presence, scale)
                else:
                    logits = logits + ops.log(
                        key_presence + keras.config.epsilon()
                    )
            weights = ops.cast(ops.softmax(logits, axis=-1), dtype)
            heads.append(matmul(weights, v))
        return self.output_map(ops.concatenate(heads, axis=-1))


class _SelfAttentionBlock(keras.layers.Layer):
    """Self-attention, the residual, the presence mask and layer norm;
    then a two-layer ReLU MLP (twice as wide inside), the residual and
    layer norm."""

    def __init__(self, num_heads, presence_masking, **kwargs):
        super().__init__(**kwargs)
        self.attention = _Attention(
            num_heads,
            presence_masking,
            dtype=self.dtype_policy,
            name="attention",
        )
        self.num_heads = num_heads

    def build(self, input_shape):
        dim = input_shape[-1]
        self.attention.build(input_shape, input_shape, input_shape)
        self.norm_1 = keras.layers.LayerNormalization(
            epsilon=_LAYER_NORM_EPSILON, dtype=self.dtype_policy, name="norm_1"
        )
        self.norm_1.build(input_shape)
        self.hidden = linear(2 * dim, "hidden", "relu", dtype=self.dtype_policy)
        self.hidden.build(input_shape)
        self.projection = linear(dim, "projection", dtype=self.dtype_policy)
        self.projection.build(tuple(input_shape[:-1]) + (2 * dim,))
        self.norm_2 = keras.layers.LayerNormalization(
            epsilon=_LAYER_NORM_EPSILON, dtype=self.dtype_policy, name="norm_2"
        )
        self.norm_2.build(input_shape)

    def call(self, x, presence=None):
        y = self.attention(x, x, x, presence) + x
        if presence is not None:
            y = y * ops.cast(presence, y.dtype)[..., None]
        y = self.norm_1(y)
        return self.norm_2(self.projection(self.hidden(y)) + y)


@keras.saving.register_keras_serializable(package="keras_capsules")
class SetTransformer(keras.layers.Layer):
    """Encodes a set of part capsules into object capsules.

    The object encoder of Stacked Capsule Autoencoders, a Set Transformer
    (Lee et al. 2019) as the official code builds it: a linear map of
    every element to `hidden_dim`; `num_layers` blocks of self-attention
    (residual, presence mask, layer norm, then a ReLU MLP of width
    `2 hidden_dim`, residual, layer norm); a linear map to
    `object_capsule_dim`; and pooling by multi-head attention of
    `num_object_capsules` learned seed vectors over the elements. Layer
    norm uses Sonnet's `epsilon=1e-5`. It is invariant to the order of the
    elements.

    **Presence.** The official code penalises the attention logits by the
    presence `p` of each key, `q.k - (1 - p) 1e32` (then divided by
    `sqrt(dim)`), and multiplies the output of each self-attention by `p`.
    With presence probabilities in `(0, 1)`, as the official model passes
    them, the penalty swamps the dot products: each query attends only to
    the element of the highest presence, evenly to several that tie, and
    by the usual softmax over the elements of presence exactly 1.
    `presence_masking="most_present"` computes exactly this (its values,
    and its gradients with respect to the queries, keys and values; none
    flows to the presence), without the 1e32 in the softmax.
    `presence_masking="log"` adds `log(p + epsilon)` to the scaled logits
    instead, weighting every element by its presence.

    Attention runs in float32 for half-precision inputs.

    Paper: [Stacked Capsule Autoencoders](https://arxiv.org/abs/1906.06818)
    (Kosiorek, Sabour, Teh & Hinton, NeurIPS 2019); [Set Transformer](
    https://arxiv.org/abs/1810.00825) (Lee et al., ICML 2019).

    Args:
        num_object_capsules: Positive int, the number of output vectors
            (object capsules). Defaults to `32`.
        object_capsule_dim: Positive int, their size. Defaults to `256`.
        hidden_dim: Positive int. Defaults to `16`.
        num_layers: Positive int, the self-attention blocks. Defaults to
            `3`.
        num_heads: Positive int. Defaults to `1`.
        presence_masking: `"most_present"` or `"log"` (see above).
            Defaults to `"most_present"`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: `(batch, num_elements, input_dim)`.
        presence: Optional `(batch, num_elements)` presence probabilities.

    Output shape:
        `(batch, num_object_capsules, object_capsule_dim)`.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> encoder = keras_capsules.layers.SetTransformer()
    >>> parts = np.random.rand(2, 40, 144).astype("float32")
    >>> tuple(encoder(parts, np.ones((2, 40), "float32")).shape)
    (2, 32, 256)

    Reference:
    - [The official TensorFlow code](
      https://github.com/akosiorek/stacked_capsule_autoencoders)
      (`capsules/attention.py`, `SetTransformer`)
    """

    def __init__(
        self,
        num_object_capsules=32,
        object_capsule_dim=256,
        hidden_dim=16,
        num_layers=3,
        num_heads=1,
        presence_masking="most_present",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_object_capsules = check_positive_int(
            num_object_capsules, "num_object_capsules"
        )
        self.object_capsule_dim = check_positive_int(
            object_capsule_dim, "object_capsule_dim"
        )
        self.hidden_dim = check_positive_int(hidden_dim, "hidden_dim")
        self.num_layers = check_positive_int(num_layers, "num_layers")
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.presence_masking = check_option(
            presence_masking, "presence_masking", PRESENCE_MASKINGS
        )
        self.input_spec = keras.layers.InputSpec(ndim=3)

    def build(self, inputs_shape, presence_shape=None):
        input_shape = inputs_shape
        self.input_map = linear(
            self.hidden_dim, "input_map", dtype=self.dtype_policy
        )
        self.input_map.build(input_shape)
        hidden_shape = tuple(input_shape[:-1]) + (self.hidden_dim,)
        self.blocks = []
        for index in range(self.num_layers):
            block = _SelfAttentionBlock(
                self.num_heads,
                self.presence_masking,
                dtype=self.dtype_policy,
                name=f"block_{index}",
            )
            block.build(hidden_shape)
            self.blocks.append(block)
        self.output_map = linear(
            self.object_capsule_dim, "output_map", dtype=self.dtype_policy
        )
        self.output_map.build(hidden_shape)
        self.seeds = self.add_weight(
            name="seeds",
            shape=(self.num_object_capsules, self.object_capsule_dim),
            initializer="glorot_uniform",
        )
        self.pooling = _Attention(
            self.num_heads,
            self.presence_masking,
            dtype=self.dtype_policy,
            name="pooling",
        )
        output_shape = tuple(input_shape[:-1]) + (self.object_capsule_dim,)
        self.pooling.build(
            (input_shape[0], self.num_object_capsules, self.object_capsule_dim),
            output_shape,
            output_shape,
        )

    def call(self, inputs, presence=None):
        hidden = self.input_map(inputs)
        for block in self.blocks:
            hidden = block(hidden, presence)
        outputs = self.output_map(hidden)
        seeds = ops.broadcast_to(
            self.seeds[None],
            (
                ops.shape(inputs)[0],
                self.num_object_capsules,
                self.object_capsule_dim,
            ),
        )
        return self.pooling(seeds, outputs, outputs, presence)

    def compute_output_shape(self, inputs_shape, presence_shape=None):
        return (
            inputs_shape[0],
            self.num_object_capsules,
            self.object_capsule_dim,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_object_capsules": self.num_object_capsules,
                "object_capsule_dim": self.object_capsule_dim,
                "hidden_dim": self.hidden_dim,
                "num_layers": self.num_layers,
                "num_heads": self.num_heads,
                "presence_masking": self.presence_masking,
            }
        )
        return config
