import keras
import numpy as np
from keras import ops

from keras_capsules.losses import StackedCapsuleAutoencoderLoss
from keras_capsules.losses import stacked_capsule_autoencoder_loss
from keras_capsules.testing import TestCase
from tests import references


def _outputs(batch=6, parts=5, objects=4, classes=10, seed=0):
    rng = np.random.default_rng(seed)
    uniform = lambda *shape: rng.uniform(size=shape).astype("float32")  # noqa: E731
    return {
        "object_presence": uniform(batch, objects),
        "object_posterior_presence": uniform(batch, objects) * parts,
        "object_poses": uniform(batch, objects, 6),
        "part_poses": uniform(batch, parts, 6),
        "part_presence": uniform(batch, parts),
        "image_log_likelihood": -1000 * uniform(batch),
        "part_log_likelihood": 50 * uniform(batch) - 25,
        "dynamic_l2": 3 * uniform(batch),
        "prior_logits": 4 * uniform(batch, classes) - 2,
        "posterior_logits": 4 * uniform(batch, classes) - 2,
    }


class StackedCapsuleAutoencoderLossTest(TestCase):
    def test_matches_the_official_objective(self):
        outputs, labels = _outputs(), np.array([0, 3, 9, 1, 1, 4])
        for given, kwargs in (
            (None, {}),
            (labels, {}),
            (labels, {"dynamic_l2_weight": 3.0, "part_likelihood_weight": 2}),
        ):
            self.assertAllClose(
                stacked_capsule_autoencoder_loss(outputs, given, **kwargs),
                references.scae_objective(outputs, given, weights=kwargs),
                atol=1e-3,
                rtol=1e-6,
            )
        # One-hot labels as integers.
        self.assertAllClose(
            stacked_capsule_autoencoder_loss(outputs, np.eye(10)[labels]),
            stacked_capsule_autoencoder_loss(outputs, labels),
        )

    def test_terms(self):
        outputs, labels = _outputs(), np.array([0, 3, 9, 1, 1, 4])
        loss, terms = stacked_capsule_autoencoder_loss(
            outputs, labels, return_terms=True
        )
        self.assertEqual(
            set(terms),
            {
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
            },
        )
        self.assertAllClose(
            terms["image_log_likelihood"],
            outputs["image_log_likelihood"].mean(),
            rtol=1e-6,
        )
        accuracy = np.mean(outputs["prior_logits"].argmax(-1) == labels)
        self.assertAllClose(terms["prior_probe_accuracy"], accuracy)

    def test_the_class_holds_the_settings(self):
        loss = StackedCapsuleAutoencoderLoss(
            dynamic_l2_weight=3.0, prior_within_example_constant=2.0
        )
        config = loss.get_config()
        restored = keras.losses.deserialize(keras.losses.serialize(loss))
        self.assertIsInstance(restored, StackedCapsuleAutoencoderLoss)
        self.assertEqual(restored.get_config(), config)
        outputs = _outputs()
        self.assertAllClose(
            loss(None, outputs),
            stacked_capsule_autoencoder_loss(
                outputs,
                dynamic_l2_weight=3.0,
                prior_within_example_constant=2.0,
            ),
        )
        self.assertEqual(tuple(ops.shape(loss(None, outputs))), ())

    def test_rejects_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "dynamic_l2_weight=-1"):
            StackedCapsuleAutoencoderLoss(dynamic_l2_weight=-1)
        with self.assertRaisesRegex(ValueError, "num_classes"):
            stacked_capsule_autoencoder_loss(_outputs(), num_classes=0)
        outputs = _outputs()
        del outputs["dynamic_l2"]
        with self.assertRaisesRegex(ValueError, "dynamic_l2"):
            stacked_capsule_autoencoder_loss(outputs)
        with self.assertRaisesRegex(ValueError, "prior_logits"):
            stacked_capsule_autoencoder_loss(
                {k: v for k, v in _outputs().items() if "logits" not in k},
                np.zeros(6, "int32"),
            )
        with self.assertRaisesRegex(ValueError, "sample_weight"):
            StackedCapsuleAutoencoderLoss()(None, _outputs(), np.ones(6))
