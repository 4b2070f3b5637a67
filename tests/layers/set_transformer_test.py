import keras
import numpy as np
from keras import ops

from keras_capsules.layers import SetTransformer
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references
from tests.layers import scae_cases

pytestmark = backend_marks.EAGER


def _weights(layer):
    return [ops.convert_to_numpy(w) for w in layer.weights]


def _attention_params(attention):
    heads = [
        tuple(_weights(m) for m in maps)
        for maps in zip(
            attention.query_maps, attention.key_maps, attention.value_maps
        )
    ]
    return heads, _weights(attention.output_map)


def _params(layer):
    return {
        "input": _weights(layer.input_map),
        "blocks": [
            {
                "attention": _attention_params(block.attention),
                "norm_1": _weights(block.norm_1),
                "hidden": _weights(block.hidden),
                "projection": _weights(block.projection),
                "norm_2": _weights(block.norm_2),
            }
            for block in layer.blocks
        ],
        "output": _weights(layer.output_map),
        "seeds": ops.convert_to_numpy(layer.seeds),
        "pooling": _attention_params(layer.pooling),
    }


def _parts(batch=2, num=6, dim=10, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, num, dim)).astype("float32")


def _small(**kwargs):
    return SetTransformer(
        num_object_capsules=3, object_capsule_dim=8, hidden_dim=4, **kwargs
    )


class SetTransformerTest(TestCase):
    def test_official_shapes_and_parameters(self):
        layer = SetTransformer()
        out = layer(_parts(num=40, dim=144), np.ones((2, 40), "float32"))
        self.assertEqual(tuple(out.shape), (2, 32, 256))
        self.assertEqual(
            layer.count_params(), scae_cases.official_count("object_encoder")
        )
        norms = [w for w in layer.weights if "norm" in w.path]
        self.assertLen(norms, 12)

    def test_matches_the_official_set_transformer(self):
        # Presences as the official model passes them: distinct values in
        # (0, 1), ties below 1 (uniform attention), ties at exactly 1
        # (the usual softmax), and no presence at all.
        layer = _small(num_heads=2, num_layers=2)
        parts = _parts(batch=4)
        presence = np.array(
            [
                [0.2, 0.9, 0.5, 0.95, 0.3, 0.6],
                [0.7, 0.7, 0.1, 0.7, 0.2, 0.3],
                [1.0, 0.4, 1.0, 1.0, 0.9, 0.99],
                [0.5] * 6,
            ],
            "float32",
        )
        layer(parts, presence)
        for p in (presence, None):
            expected = references.scae_set_transformer(parts, p, _params(layer))
            self.assertAllClose(layer(parts, p), expected, atol=1e-5, rtol=1e-5)

    @backend_marks.COMPILED
    def test_official_masking_in_compiled_functions(self):
        # The official 1e32 penalty overflowed to NaN in XLA-fused softmax
        # kernels for some batch sizes; the layer must stay finite there.
        layer = _small()
        parts = _parts(batch=8)
        presence = np.random.default_rng(2).uniform(size=(8, 6))
        inputs = keras.Input((6, 10))
        presence_input = keras.Input((6,))
        model = keras.Model(
            [inputs, presence_input], layer(inputs, presence_input)
        )
        for batch in (3, 8):
            out = model.predict(
                [parts[:batch], presence[:batch]], batch_size=batch, verbose=0
            )
            self.assertAllFinite(out)
            self.assertAllClose(
                out, layer(parts[:batch], presence[:batch]), atol=1e-5
            )

    def test_invariant_to_the_order_of_the_elements(self):
        layer = _small(num_heads=2)
        parts = _parts()
        presence = np.random.default_rng(1).uniform(size=(2, 6))
        order = np.array([3, 0, 5, 1, 4, 2])
        self.assertAllClose(
            layer(parts, presence),
            layer(parts[:, order], presence[:, order]),
            atol=1e-5,
        )

    def test_official_masking_attends_to_the_most_present_part(self):
        # Presences in (0, 1): a penalty of (1 - p) 1e32 leaves only the
        # element of the highest presence, so the others do not matter.
        layer = _small()
        parts = _parts()
        presence = np.tile([[0.2, 0.9, 0.5, 0.95, 0.3, 0.6]], (2, 1))
        changed = parts.copy()
        changed[:, [0, 1, 2, 4, 5]] += 3.0
        self.assertAllClose(
            layer(parts, presence), layer(changed, presence), atol=1e-5
        )
        changed[:, 3] += 3.0
        self.assertFalse(
            np.allclose(
                ops.convert_to_numpy(layer(parts, presence)),
                ops.convert_to_numpy(layer(changed, presence)),
            )
        )

    def test_log_masking_weights_every_part(self):
        layer = _small(presence_masking="log")
        parts = _parts()
        presence = np.tile([[0.2, 0.9, 0.5, 0.95, 0.3, 0.6]], (2, 1))
        changed = parts.copy()
        changed[:, 0] += 3.0
        self.assertFalse(
            np.allclose(
                ops.convert_to_numpy(layer(parts, presence)),
                ops.convert_to_numpy(layer(changed, presence)),
            )
        )
        # An absent element (presence 0) still does not count.
        absent = presence.copy()
        absent[:, 0] = 0.0
        self.assertAllClose(
            layer(parts, absent), layer(changed, absent), atol=1e-4
        )

    def test_half_precision_stays_finite(self):
        layer = _small(dtype="mixed_float16")
        out = layer(_parts(), np.full((2, 6), 0.5, "float32"))
        self.assertAllFinite(ops.cast(out, "float32"))

    def test_config_round_trip(self):
        layer = _small(num_layers=2, num_heads=3, presence_masking="log")
        clone = SetTransformer.from_config(layer.get_config())
        self.assertEqual(clone.get_config(), layer.get_config())

    def test_rejects_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "presence_masking"):
            SetTransformer(presence_masking="boolean")
        with self.assertRaisesRegex(ValueError, "num_heads"):
            SetTransformer(num_heads=0)
