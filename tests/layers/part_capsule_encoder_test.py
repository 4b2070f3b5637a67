import numpy as np
from keras import ops

from keras_capsules.layers import PartCapsuleEncoder
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references
from tests.layers import scae_cases

pytestmark = backend_marks.EAGER


class PartCapsuleEncoderTest(TestCase):
    def test_official_shapes_and_parameters(self):
        layer = PartCapsuleEncoder()
        parts = layer(scae_cases.images())
        self.assertEqual(tuple(parts["poses"].shape), (2, 40, 6))
        self.assertEqual(tuple(parts["features"].shape), (2, 40, 16))
        self.assertEqual(tuple(parts["presence"].shape), (2, 40))
        self.assertEqual(
            layer.count_params(), scae_cases.official_count("part_encoder")
        )
        self.assertEqual(
            sorted(tuple(w.shape) for w in layer.weights),
            sorted(
                shape[-4:] if len(shape) == 4 else shape
                for shape in scae_cases.OFFICIAL_SHAPES["part_encoder"]
            ),
        )

    def test_poses_are_official_transforms_and_presence_in_range(self):
        layer = PartCapsuleEncoder(num_parts=5)
        parts = layer(scae_cases.images(size=28))
        poses = ops.convert_to_numpy(parts["poses"])
        determinant = (
            poses[..., 0] * poses[..., 4] - poses[..., 1] * poses[..., 3]
        )
        self.assertTrue(np.all(determinant > 1e-4 * (1 - 1e-5)))
        self.assertTrue(np.all(np.abs(poses[..., [2, 5]]) <= 1.0))
        presence = ops.convert_to_numpy(parts["presence"])
        self.assertAllClose(
            presence,
            references.sigmoid(ops.convert_to_numpy(parts["presence_logits"])),
            atol=1e-6,
        )

    def test_noise(self):
        images = scae_cases.images(size=28)
        layer = PartCapsuleEncoder(num_parts=4, seed=1)
        first = layer(images)["presence_logits"]
        # Deterministic outside training, and equal to no noise at all.
        self.assertAllClose(first, layer(images)["presence_logits"])
        quiet = PartCapsuleEncoder(num_parts=4, noise_scale=0.0)
        quiet(images)
        quiet.set_weights(layer.get_weights())
        self.assertAllClose(first, quiet(images)["presence_logits"])
        # In training, within [-2, 2] and drawn anew at every call.
        noisy = layer(images, training=True)["presence_logits"]
        again = layer(images, training=True)["presence_logits"]
        difference = ops.convert_to_numpy(noisy - first)
        self.assertTrue(np.all(np.abs(difference) <= 2.0 + 1e-6))
        self.assertGreater(np.abs(difference).max(), 0.1)
        self.assertFalse(
            np.allclose(
                ops.convert_to_numpy(noisy), ops.convert_to_numpy(again)
            )
        )
        # The official evaluation: noise outside training too, the same
        # at every call for one seed.
        evaluation = PartCapsuleEncoder(num_parts=4, inference_noise_seed=7)
        evaluation(images)
        evaluation.set_weights(layer.get_weights())
        a = evaluation(images)["presence_logits"]
        self.assertAllClose(a, evaluation(images)["presence_logits"])
        difference = ops.convert_to_numpy(a - first)
        self.assertGreater(np.abs(difference).max(), 0.1)
        self.assertTrue(np.all(np.abs(difference) <= 2.0 + 1e-6))

    def test_head_layouts_pool_the_same_values_differently(self):
        images = scae_cases.images(size=28)
        official = PartCapsuleEncoder(num_parts=3)
        official(images)
        grouped = PartCapsuleEncoder(
            num_parts=3, part_head_layout="per_capsule"
        )
        grouped(images)
        grouped.set_weights(official.get_weights())
        a = ops.convert_to_numpy(official(images)["features"])
        b = ops.convert_to_numpy(grouped(images)["features"])
        self.assertEqual(a.shape, b.shape)
        self.assertFalse(np.allclose(a, b))

    def test_config_round_trip(self):
        layer = PartCapsuleEncoder(
            num_parts=3,
            num_part_features=2,
            filters=(4, 4),
            strides=(2, 1),
            part_head_layout="per_capsule",
            inference_noise_seed=4,
            seed=3,
        )
        clone = PartCapsuleEncoder.from_config(layer.get_config())
        self.assertEqual(clone.get_config(), layer.get_config())

    def test_rejects_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "strides"):
            PartCapsuleEncoder(filters=(4, 4), strides=(1,))
        with self.assertRaisesRegex(ValueError, "part_head_layout"):
            PartCapsuleEncoder(part_head_layout="official")
        with self.assertRaisesRegex(ValueError, "inference_noise_seed"):
            PartCapsuleEncoder(inference_noise_seed=-1)
        with self.assertRaisesRegex(ValueError, "too small"):
            PartCapsuleEncoder()(np.zeros((1, 8, 8, 1), "float32"))
