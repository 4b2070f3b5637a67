import os

import keras
import numpy as np
from keras import ops

from keras_capsules.models import EfficientCapsNet
from keras_capsules.models import StackedCapsuleAutoencoder
from keras_capsules.optimizers import RMSprop
from keras_capsules.testing import TestCase
from tests.layers import scae_cases

_OUTPUTS = {
    "object_presence": (3, 4),
    "object_poses": (3, 4, 6),
    "object_posterior_presence": (3, 4),
    "part_poses": (3, 6, 6),
    "part_presence": (3, 6),
    "image_log_likelihood": (3,),
    "part_log_likelihood": (3,),
    "dynamic_l2": (3,),
    "prior_logits": (3, 10),
    "posterior_logits": (3, 10),
}


def _small(**kwargs):
    config = dict(
        image_shape=(28, 28, 1),
        num_parts=6,
        num_objects=4,
        template_size=(7, 7),
        num_part_features=4,
        object_dim=8,
        seed=0,
    )
    config.update(kwargs)
    return StackedCapsuleAutoencoder(**config)


def _images(batch=3, size=28, seed=0):
    return scae_cases.images(batch=batch, size=size, seed=seed)


class StackedCapsuleAutoencoderTest(TestCase):
    def test_official_parameter_count(self):
        model = StackedCapsuleAutoencoder.from_preset("mnist")
        modules = {
            "part_encoder": model.part_encoder,
            "template_decoder": model.template_decoder,
            "object_encoder": model.object_encoder,
            "object_decoder": model.object_decoder,
        }
        for name, layer in modules.items():
            self.assertEqual(
                layer.count_params(), scae_cases.official_count(name), name
            )
        total = sum(
            scae_cases.official_count(n) for n in scae_cases.OFFICIAL_SHAPES
        )
        self.assertEqual(total, 3_540_823)
        self.assertEqual(model.count_params(), total)
        self.assertEqual(
            sum(int(np.prod(w.shape)) for w in model.trainable_weights), total
        )

    def test_builds_after_a_functional_model(self):
        # Keras puts `Functional` into the bases of a functional model's
        # classes; the autoencoder must not share one of those.
        EfficientCapsNet()
        self.assertIsInstance(_small(), StackedCapsuleAutoencoder)

    def test_fit_logs_every_term_and_labels_reach_only_the_probes(self):
        model = _small(noise_scale=0.0)
        model.compile(optimizer=keras.optimizers.SGD(0.1))
        x, y = _images(batch=4), np.array([0, 1, 2, 3])
        probes = {
            id(w)
            for layer in (model.prior_probe, model.posterior_probe)
            for w in layer.weights
        }
        before = [ops.convert_to_numpy(w) for w in model.weights]
        history = model.fit(x, y, batch_size=4, verbose=0).history
        with_labels = [ops.convert_to_numpy(w) for w in model.weights]
        for w, value in zip(model.weights, before):
            w.assign(value)
        unlabelled = model.fit(x, batch_size=4, verbose=0).history
        without = [ops.convert_to_numpy(w) for w in model.weights]
        # Every term is logged; the probes' only with labels.
        for name in (
            "loss",
            "image_log_likelihood",
            "part_log_likelihood",
            "dynamic_l2",
            "prior_within_sparsity",
            "prior_between_sparsity",
            "posterior_within_sparsity",
            "posterior_between_sparsity",
            "prior_probe_accuracy",
            "posterior_probe_loss",
        ):
            self.assertTrue(np.isfinite(history[name][-1]), name)
        self.assertIn("image_log_likelihood", unlabelled)
        self.assertNotIn("prior_probe_accuracy", unlabelled)
        for w, a, b, c in zip(model.weights, with_labels, without, before):
            if id(w) in probes:
                self.assertFalse(np.allclose(a, c), w.path)
                self.assertAllClose(b, c)
            else:
                self.assertAllClose(a, b, atol=1e-6, msg=w.path)

    def test_default_optimizer_is_the_official_one(self):
        model = _small()
        model.compile(batch_size=32)
        optimizer = model.optimizer
        self.assertIsInstance(optimizer, RMSprop)
        self.assertAllClose(float(optimizer.learning_rate), 3e-5)
        self.assertEqual(optimizer.momentum, 0.9)
        self.assertEqual(optimizer.initial_velocity, 1.0)
        self.assertAllClose(optimizer.epsilon, 1e-2 / 32**2)

    def test_compile_rejects_a_loss_metrics_or_schedule(self):
        model = _small()
        with self.assertRaisesRegex(ValueError, "loss="):
            model.compile(loss="mse")
        with self.assertRaisesRegex(ValueError, "metrics="):
            model.compile(metrics=["accuracy"])
        with self.assertRaisesRegex(ValueError, "total_steps=10"):
            model.compile(total_steps=10)

    def test_outputs_uint8_images_and_non_finite_pixels(self):
        model = _small(noise_at_inference=False)
        outputs = model(_images())
        self.assertEqual(
            {k: tuple(v.shape) for k, v in outputs.items()}, _OUTPUTS
        )
        self.assertAllFinite(list(outputs.values()))
        x = (_images() * 255).round().astype("uint8")
        self.assertAllClose(
            model(x)["object_presence"],
            model(x.astype("float32") / 255)["object_presence"],
            atol=1e-6,
        )
        bad = x.astype("float32") / 255
        bad[1, 3, 4, 0] = np.nan
        outputs = model(bad)
        for name, value in outputs.items():
            value = ops.convert_to_numpy(value)
            self.assertTrue(np.all(np.isnan(value[1])), name)
            self.assertTrue(np.all(np.isfinite(value[[0, 2]])), name)
        with self.assertRaisesRegex(ValueError, "image_shape"):
            model(np.zeros((2, 40, 40, 1), "float32"))

    def test_keras_file_round_trip(self):
        model = _small(noise_at_inference=False)
        model.compile()
        path = os.path.join(self.get_temp_dir(), "scae.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
        self.assertIs(type(loaded), StackedCapsuleAutoencoder)
        self.assertEqual(loaded.get_config(), model.get_config())
        expected = model.predict(_images(), verbose=0)
        actual = loaded.predict(_images(), verbose=0)
        for name in expected:
            self.assertAllClose(actual[name], expected[name], atol=1e-5)
        self.assertIsInstance(loaded.optimizer, RMSprop)

    def test_preset_round_trip(self):
        model = _small(noise_at_inference=False, part_head_layout="per_capsule")
        path = os.path.join(self.get_temp_dir(), "preset")
        model.save_to_preset(path)
        loaded = StackedCapsuleAutoencoder.from_preset(path)
        for a, b in zip(loaded.get_weights(), model.get_weights()):
            np.testing.assert_array_equal(a, b)
        self.assertAllClose(
            loaded(_images())["object_presence"],
            model(_images())["object_presence"],
        )

    def test_reconstruct(self):
        model = _small()
        reconstruction = model.reconstruct(_images())
        self.assertEqual(tuple(reconstruction.shape), (3, 28, 28, 1))
        self.assertAllFinite(reconstruction)

    def test_rejects_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "dynamic_l2_weight"):
            _small(dynamic_l2_weight=-1.0)
        with self.assertRaisesRegex(ValueError, "presence_masking"):
            _small(presence_masking="hard")
        with self.assertRaisesRegex(ValueError, "image_shape"):
            _small(image_shape=(28, 28))
