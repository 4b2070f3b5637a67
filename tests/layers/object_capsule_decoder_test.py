import numpy as np
from keras import ops

from keras_capsules.layers import ObjectCapsuleDecoder
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references
from tests.layers import scae_cases

pytestmark = backend_marks.EAGER


def _features(batch=2, num=4, dim=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, num, dim)).astype("float32")


def _numpy(outputs):
    return {k: ops.convert_to_numpy(v) for k, v in outputs.items()}


class ObjectCapsuleDecoderTest(TestCase):
    def test_official_shapes_and_parameters(self):
        layer = ObjectCapsuleDecoder()
        out = layer(_features(num=32, dim=256))
        self.assertEqual(tuple(out["votes"].shape), (2, 32, 40, 6))
        self.assertEqual(tuple(out["presence"].shape), (2, 32))
        self.assertEqual(tuple(out["dynamic_l2"].shape), (2,))
        self.assertEqual(
            layer.count_params(), scae_cases.official_count("object_decoder")
        )

    def test_votes_compose_the_relations(self):
        # With the caps MLP's output layer zeroed, the dynamic relations
        # vanish and the object-viewer pose is its bias (0): the votes are
        # geometric(0) @ geometric(static relations).
        layer = ObjectCapsuleDecoder(num_parts=5, noise_scale=0.0)
        features = _features()
        layer(features)
        layer.caps_output[0].assign(np.zeros(layer.caps_output[0].shape))
        out = layer(features)
        viewer = references.scae_geometric_transform(np.zeros((4, 1, 6)))
        parts = references.scae_geometric_transform(
            ops.convert_to_numpy(layer.static_relations)
        )
        votes = (viewer @ parts)[..., :2, :].reshape(4, 5, 6)
        self.assertAllClose(out["votes"], np.stack([votes] * 2), atol=1e-6)
        self.assertAllClose(out["dynamic_l2"], np.zeros(2))
        # Presences sigmoid(0) sigmoid(0), scales softplus(0.5) + 0.01.
        self.assertAllClose(out["vote_presence"], np.full((2, 4, 5), 0.25))
        self.assertAllClose(out["presence"], np.full((2, 4), 0.25))
        self.assertAllClose(
            out["vote_scales"], np.full((2, 4, 5), np.log1p(np.exp(0.5)) + 0.01)
        )

    def test_presence_is_the_largest_vote_presence(self):
        out = ObjectCapsuleDecoder(num_parts=5, seed=1)(_features())
        self.assertAllClose(
            out["presence"], ops.max(out["vote_presence"], axis=-1)
        )
        dynamic_free = ObjectCapsuleDecoder(num_parts=5)
        dynamic_l2 = ops.convert_to_numpy(
            dynamic_free(_features())["dynamic_l2"]
        )
        self.assertGreater(dynamic_l2.min(), 0.0)

    def test_noise(self):
        features = _features()
        layer = ObjectCapsuleDecoder(num_parts=5, seed=1)
        first = _numpy(layer(features))
        quiet = ObjectCapsuleDecoder(num_parts=5, noise_scale=0.0)
        quiet(features)
        quiet.set_weights(layer.get_weights())
        # Deterministic outside training: the outputs without noise.
        for name, value in _numpy(layer(features)).items():
            np.testing.assert_array_equal(value, first[name])
        for name, value in _numpy(quiet(features)).items():
            np.testing.assert_array_equal(value, first[name])
        # In training, drawn anew at every call.
        noisy = _numpy(layer(features, training=True))
        again = _numpy(layer(features, training=True))
        self.assertFalse(np.allclose(noisy["presence"], first["presence"]))
        self.assertFalse(np.allclose(noisy["presence"], again["presence"]))
        # The official evaluation: the same noise at every call.
        evaluation = ObjectCapsuleDecoder(num_parts=5, inference_noise_seed=2)
        evaluation(features)
        evaluation.set_weights(layer.get_weights())
        a = _numpy(evaluation(features))
        b = _numpy(evaluation(features))
        np.testing.assert_array_equal(a["vote_presence"], b["vote_presence"])
        self.assertFalse(np.allclose(a["presence"], first["presence"]))

    def test_config_round_trip(self):
        layer = ObjectCapsuleDecoder(
            num_parts=7,
            num_params=5,
            hidden_dim=9,
            similarity=True,
            inference_noise_seed=3,
            seed=2,
        )
        clone = ObjectCapsuleDecoder.from_config(layer.get_config())
        self.assertEqual(clone.get_config(), layer.get_config())

    def test_rejects_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "noise_scale"):
            ObjectCapsuleDecoder(noise_scale=-1.0)
        with self.assertRaisesRegex(ValueError, "num_parts"):
            ObjectCapsuleDecoder(num_parts=0)
