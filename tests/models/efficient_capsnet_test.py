import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules.layers import DepthwisePrimaryCaps
from keras_capsules.layers import SelfAttentionCaps
from keras_capsules.losses import MarginLoss
from keras_capsules.models import EfficientCapsNet
from keras_capsules.testing import TestCase
from tests import references
from tests.models.inference_loss import inference_loss

# Small enough to train in seconds on any backend, every size different:
# 20x20 -> 18 -> 8 -> 6, and a 6x6 primary window over 16 channels gives 4
# capsules of 4 dimensions.
SMALL_CONFIG = {
    "image_shape": (20, 20, 3),
    "num_classes": 4,
    "conv_filters": (8, 12, 16),
    "conv_kernel_sizes": (3, 3, 3),
    "conv_strides": (1, 2, 1),
    "activation": "relu",
    "normalization": "batch",
    "primary_kernel_size": 6,
    "primary_strides": 1,
    "primary_capsule_dim": 4,
    "capsule_dim": 6,
    "decoder_type": "dense",
    "reconstruction_weight": 0.392,
}


def _data(batch=8, seed=0, config=SMALL_CONFIG):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(batch,) + config["image_shape"])
    y = np.eye(config["num_classes"], dtype="float32")[
        np.arange(batch) % config["num_classes"]
    ]
    return x.astype("float32"), y


def _numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x), dtype="float64")


class EfficientCapsNetTest(TestCase):
    @parameterized.named_parameters(
        ("mnist", "mnist", 161_824, 1_411_344, 576, (28, 28, 1)),
        ("multimnist", "multimnist", 154_656, 1_936_144, 576, (36, 36, 1)),
        ("smallnorb", "smallnorb", 151_664, 229_570, 0, (48, 48, 2)),
    )
    @pytest.mark.primary_backend
    def test_authors_parameter_counts(
        self, preset, encoder, decoder, frozen, image_shape
    ):
        model = EfficientCapsNet.from_preset(preset)
        self.assertEqual(model.image_shape, image_shape)
        decoder_params = model.decoder.count_params()
        self.assertEqual(decoder_params, decoder)
        trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
        self.assertEqual(trainable - decoder_params, encoder)
        frozen_params = sum(
            int(np.prod(w.shape)) for w in model.non_trainable_weights
        )
        self.assertEqual(frozen_params, frozen)
        self.assertEqual(
            model.primary_caps.compute_output_shape(
                model.get_layer("primary_caps").input.shape
            )[1:],
            (16, 8),
        )

    @pytest.mark.primary_backend
    def test_default_is_the_mnist_preset(self):
        self.assertEqual(
            EfficientCapsNet(name="a").get_config(),
            EfficientCapsNet.from_preset("mnist", name="a").get_config(),
        )
        with self.assertRaisesRegex(ValueError, r"Received: preset=cifar$"):
            EfficientCapsNet.from_preset("cifar")

    @pytest.mark.primary_backend
    def test_presets(self):
        presets = EfficientCapsNet.presets
        self.assertEqual(
            set(presets),
            {"mnist", "multimnist", "smallnorb", "efficient_capsnet_mnist"},
        )
        for name in ("mnist", "multimnist", "smallnorb"):
            self.assertFalse(presets[name]["trained"])
            self.assertEqual(presets[name]["class_name"], "EfficientCapsNet")
            self.assertIsInstance(presets[name]["description"], str)
        self.assertEqual(
            dict(presets["multimnist"]["config"])["image_shape"], (36, 36, 1)
        )
        self.assertTrue(presets["efficient_capsnet_mnist"]["trained"])

    @pytest.mark.primary_backend
    def test_config_with_the_old_decoder_argument_fails(self):
        # `decoder` was renamed `decoder_type`; configs are not translated.
        config = EfficientCapsNet(**SMALL_CONFIG).get_config()
        config["decoder"] = config.pop("decoder_type")
        with self.assertRaises(TypeError):
            EfficientCapsNet.from_config(config)

    @pytest.mark.backends("tensorflow", "torch")
    def test_compute_loss_adds_mean_reconstruction_error(self):
        model = EfficientCapsNet(**SMALL_CONFIG)
        model.compile()
        x, y = _data(4)
        weights = np.array([1.0, 0.0, 2.0, 0.5], dtype="float32")
        lengths = _numpy(model.predict(x, verbose=0))
        errors = ((_numpy(model.reconstruct(x, y)) - x) ** 2).reshape(4, -1)
        expected = np.mean(
            weights
            * (references.margin_loss(y, lengths) + 0.392 * errors.mean(-1))
        )
        loss = inference_loss(model, x, y, lengths.astype("float32"), weights)
        self.assertAllClose(loss, expected, atol=1e-5, rtol=1e-5)

    def test_fit_evaluate_save_load(self):
        model = EfficientCapsNet(**SMALL_CONFIG)
        model.compile()
        self.assertIsInstance(model.loss, MarginLoss)
        x, y = _data(8)
        history = model.fit(x, y, batch_size=4, epochs=2, verbose=0)
        for key in ("loss", "accuracy", "reconstruction_loss"):
            self.assertTrue(np.all(np.isfinite(history.history[key])))
        self.assertLess(history.history["loss"][-1], history.history["loss"][0])
        logs = model.evaluate(x, y, verbose=0, return_dict=True)
        self.assertEqual(set(logs), {"loss", "accuracy", "reconstruction_loss"})

        loaded = self.run_model_saving_test(
            model, x, layer_cls=SelfAttentionCaps
        )
        self.assertTrue(
            any(isinstance(lay, DepthwisePrimaryCaps) for lay in loaded.layers)
        )
        self.assertEqual(loaded.get_config(), model.get_config())
        self.assertAllClose(
            loaded.reconstruct(x), model.reconstruct(x), atol=1e-5
        )
        self.assertEqual(
            loaded.optimizer.get_config()["learning_rate"]["class_name"],
            "PiecewiseConstantDecay",
        )
        self.assertEqual(int(loaded.optimizer.iterations), 4)
        history = loaded.fit(x, y, batch_size=8, epochs=1, verbose=0)
        self.assertTrue(np.isfinite(history.history["loss"][0]))

    @pytest.mark.primary_backend
    def test_default_learning_rate_decays_per_epoch_to_a_floor(self):
        # The authors' epochs: 60,000 images at batch 16, 3,750 steps.
        model = EfficientCapsNet(**SMALL_CONFIG)
        model.compile()
        config = model.optimizer.get_config()["learning_rate"]
        schedule = keras.optimizers.schedules.deserialize(config)
        for step, epoch in (
            (0, 0),
            (3749, 0),
            (3751, 1),
            (9000, 2),
            (3750 * 75 + 1, 75),
        ):
            self.assertAllClose(
                schedule(step), 5e-4 * 0.97**epoch, rtol=1e-5, atol=0
            )
        for step in (3750 * 76 + 1, 1_000_000):
            self.assertAllClose(schedule(step), 5e-5, rtol=1e-5, atol=0)
        # The run's length does not change the schedule.
        model.compile(total_steps=10)
        self.assertEqual(model.optimizer.get_config()["learning_rate"], config)
        with self.assertRaisesRegex(
            TypeError, r"unexpected keyword argument 'steps_per_epoch'"
        ):
            model.compile(steps_per_epoch=100)

    @pytest.mark.primary_backend
    def test_two_objects(self):
        model = EfficientCapsNet(**SMALL_CONFIG, num_objects=2)
        model.compile()
        rng = np.random.default_rng(0)
        object_labels = np.eye(4, dtype="float32")[
            np.stack([np.arange(6) % 4, (np.arange(6) + 1) % 4], axis=1)
        ]
        objects = rng.uniform(size=(6, 2, 20, 20, 3)).astype("float32")
        x = np.minimum(objects.sum(axis=1), 1.0)
        y = {
            "labels": object_labels.sum(axis=1),
            "object_labels": object_labels,
            "objects": objects,
        }
        lengths = _numpy(model.predict(x, verbose=0))
        errors = (_numpy(model.reconstruct(x, object_labels)) - objects) ** 2
        expected = np.mean(
            references.margin_loss(y["labels"], lengths)
            + 0.392 * errors.reshape(6, -1).mean(-1)
        )
        loss = model.compute_loss(
            x=keras.ops.convert_to_tensor(x),
            y={k: keras.ops.convert_to_tensor(v) for k, v in y.items()},
            y_pred=keras.ops.convert_to_tensor(lengths.astype("float32")),
            training=False,
        )
        self.assertAllClose(loss, expected, atol=1e-5, rtol=1e-5)
        history = model.fit(x, y, batch_size=3, epochs=1, verbose=0)
        self.assertTrue(np.isfinite(history.history["loss"][0]))
        self.assertEqual(tuple(model.reconstruct(x).shape), (6, 2, 20, 20, 3))

    @pytest.mark.primary_backend
    def test_smallnorb_network_trains(self):
        config = dict(
            EfficientCapsNet.presets["smallnorb"]["config"],
            conv_filters=(4, 8, 8, 16),
        )
        model = EfficientCapsNet(**config)
        self.assertIsInstance(
            model.get_layer("norm1"), keras.layers.GroupNormalization
        )
        model.compile()
        x, y = _data(4, config=config)
        history = model.fit(x, y, batch_size=2, epochs=1, verbose=0)
        self.assertTrue(np.isfinite(history.history["loss"][0]))
        self.assertEqual(tuple(model.reconstruct(x).shape), (4, 48, 48, 2))

    @pytest.mark.primary_backend
    def test_without_decoder(self):
        model = EfficientCapsNet(**dict(SMALL_CONFIG, decoder_type=None))
        self.assertIsNone(model.decoder)
        model.compile(optimizer="adam")
        x, y = _data(4)
        history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        self.assertNotIn("reconstruction_loss", history.history)
        with self.assertRaisesRegex(
            ValueError, r"no decoder.*Received: decoder_type=None$"
        ):
            model.reconstruct(x)

    @pytest.mark.primary_backend
    def test_config_round_trip(self):
        model = EfficientCapsNet(**SMALL_CONFIG, name="small")
        config = model.get_config()
        self.assertEqual(
            config,
            dict(
                SMALL_CONFIG,
                name="small",
                trainable=True,
                squash_form="exponential",
                use_prior=True,
                num_objects=1,
            ),
        )
        revived = EfficientCapsNet.from_config(json.loads(json.dumps(config)))
        self.assertEqual(revived.get_config(), config)
        self.assertEqual(
            keras.saving.serialize_keras_object(model)["registered_name"],
            "keras_capsules>EfficientCapsNet",
        )

    @parameterized.named_parameters(
        ("float16", "mixed_float16"), ("bfloat16", "mixed_bfloat16")
    )
    @pytest.mark.backends("tensorflow", "torch")
    def test_mixed_precision(self, policy):
        original = keras.config.dtype_policy()
        keras.config.set_dtype_policy(policy)
        self.addCleanup(keras.config.set_dtype_policy, original)
        model = EfficientCapsNet(**SMALL_CONFIG)
        model.compile()
        x, y = _data(4)
        lengths = model(x)
        self.assertAllFinite(lengths)
        loss = model.compute_loss(
            x=keras.ops.convert_to_tensor(x),
            y=keras.ops.convert_to_tensor(y),
            y_pred=lengths,
            training=False,
        )
        self.assertEqual(keras.backend.standardize_dtype(loss.dtype), "float32")
        self.assertAllFinite(loss)

    @pytest.mark.backends("tensorflow", "torch")
    def test_hostile_inputs_stay_finite(self):
        model = EfficientCapsNet(**SMALL_CONFIG)
        model.compile()
        x = np.stack(
            [
                np.zeros((20, 20, 3)),
                np.ones((20, 20, 3)),
                np.full((20, 20, 3), 1e4),
            ]
        ).astype("float32")
        y = np.eye(4, dtype="float32")[:3]
        self.assertAllFinite(model.predict(x, verbose=0))
        history = model.fit(x, y, batch_size=3, epochs=1, verbose=0)
        self.assertTrue(np.isfinite(history.history["loss"][0]))
        self.assertAllFinite(model.trainable_weights)

    @parameterized.named_parameters(
        ("image_shape", {"image_shape": (28, 28)}, r"image_shape=\(28, 28\)$"),
        ("num_classes", {"num_classes": 0}, r"num_classes=0$"),
        ("filters", {"conv_filters": (8, 0)}, r"conv_filters=\(8, 0\)$"),
        (
            "kernels",
            {"conv_kernel_sizes": (3, 3)},
            r"tuple of 3 positive .*conv_kernel_sizes=\(3, 3\)$",
        ),
        ("activation", {"activation": "gelu"}, r"activation=gelu$"),
        ("normalization", {"normalization": "layer"}, r"normalization=layer$"),
        ("decoder", {"decoder_type": "mlp"}, r"decoder_type=mlp$"),
        ("weight", {"reconstruction_weight": -1}, r"reconstruction_weight=-1$"),
        (
            "capsule_split",
            {"primary_capsule_dim": 5},
            r"divide .*\(16\)\. Received: primary_capsule_dim=5$",
        ),
        (
            "too_small",
            {"image_shape": (12, 12, 3)},
            r"too small.*Received: image_shape=\(12, 12, 3\)$",
        ),
        (
            "conv_decoder",
            {"decoder_type": "convolutional"},
            r"48x48.*Received: image_shape=\(20, 20, 3\)$",
        ),
        ("num_objects", {"num_objects": 5}, r"num_objects=5$"),
        (
            "squash_form",
            {"squash_form": "hinton"},
            r"squash_form must be .*Received: squash_form=hinton$",
        ),
    )
    @pytest.mark.primary_backend
    def test_invalid_arguments(self, kwargs, pattern):
        with self.assertRaisesRegex(ValueError, pattern):
            EfficientCapsNet(**dict(SMALL_CONFIG, **kwargs))

    @pytest.mark.primary_backend
    def test_squash_form_and_prior_reach_both_capsule_layers(self):
        options = {"squash_form": "rational", "use_prior": False}
        model = EfficientCapsNet(**SMALL_CONFIG, **options)
        self.assertEqual(model.primary_caps.squash_form, "rational")
        self.assertEqual(model.digit_caps.squash_form, "rational")
        self.assertFalse(model.digit_caps.use_prior)
        # Without the prior, the routing layer has no prior weights.
        default = EfficientCapsNet(**SMALL_CONFIG)
        self.assertEqual(default.primary_caps.squash_form, "exponential")
        self.assertEqual(default.digit_caps.squash_form, "exponential")
        self.assertTrue(default.digit_caps.use_prior)
        self.assertLess(
            model.digit_caps.count_params(), default.digit_caps.count_params()
        )
        config = model.get_config()
        self.assertEqual({k: config[k] for k in options}, options)
        revived = EfficientCapsNet.from_config(json.loads(json.dumps(config)))
        self.assertEqual(revived.get_config(), config)
        self.assertEqual(revived.digit_caps.squash_form, "rational")
        self.assertFalse(revived.digit_caps.use_prior)
        # The squash changes what the same weights compute.
        rational = EfficientCapsNet(**SMALL_CONFIG, squash_form="rational")
        rational.set_weights(default.get_weights())
        x, _ = _data(2)
        self.assertFalse(
            np.allclose(
                rational.predict(x, verbose=0), default.predict(x, verbose=0)
            )
        )
        with self.assertRaisesRegex(
            TypeError, r"use_prior must be a boolean.*Received: use_prior=1$"
        ):
            EfficientCapsNet(**SMALL_CONFIG, use_prior=1)

    @pytest.mark.large
    def test_jax_file_loads_on_torch(self):
        directory = self.get_temp_dir()
        write = textwrap.dedent(
            f"""
            import numpy as np
            import keras
            from keras_capsules.models import EfficientCapsNet
            keras.utils.set_random_seed(0)
            model = EfficientCapsNet(**{SMALL_CONFIG!r})
            model.compile()
            x = np.random.default_rng(0).uniform(
                size=(4, 20, 20, 3)).astype("float32")
            model.fit(x, np.eye(4, dtype="float32"), epochs=1, verbose=0)
            np.save(r"{directory}/x.npy", x)
            np.save(r"{directory}/lengths.npy", model.predict(x, verbose=0))
            model.save(r"{directory}/model.keras")
            """
        )
        read = textwrap.dedent(
            f"""
            import numpy as np
            import keras
            import keras_capsules  # Registers the classes; nothing else.
            model = keras.models.load_model(r"{directory}/model.keras")
            x = np.load(r"{directory}/x.npy")
            np.testing.assert_allclose(
                model.predict(x, verbose=0),
                np.load(r"{directory}/lengths.npy"), atol=1e-5)
            print(type(model).__name__, keras.backend.backend())
            """
        )
        for backend, script in (("jax", write), ("torch", read)):
            env = dict(os.environ, KERAS_BACKEND=backend)
            result = subprocess.run(
                [sys.executable, "-c", script],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertIn("EfficientCapsNet torch", result.stdout)
