import math
import os

import keras
import numpy as np
import pytest
from keras import ops

from keras_capsules.losses import StackedCapsuleAutoencoderLoss
from keras_capsules.models import CapsNet
from keras_capsules.models import EfficientCapsNet
from keras_capsules.models import MatrixCapsNet
from keras_capsules.models import StackedCapsuleAutoencoder
from keras_capsules.optimizers import RMSprop
from keras_capsules.testing import TestCase
from tests.layers import scae_cases

_FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
_OUTPUTS = {
    "object_presence": (3, 4),
    "object_posterior_presence": (3, 4),
    "object_poses": (3, 4, 6),
    "part_poses": (3, 6, 6),
    "part_presence": (3, 6),
    "image_log_likelihood": (3,),
    "part_log_likelihood": (3,),
    "dynamic_l2": (3,),
    "prior_logits": (3, 10),
    "posterior_logits": (3, 10),
}
# TensorFlow's functions without XLA, which compiles this network in 10 to
# 20 s: these tests check what a compiled function computes, and the XLA
# path is tested in stacked_capsule_autoencoder_state_test.py and the
# learning test.
_COMPILE = (
    {"jit_compile": False} if keras.backend.backend() == "tensorflow" else {}
)
_LAYERS = (
    "part_encoder",
    "template_decoder",
    "object_encoder",
    "object_decoder",
    "prior_probe",
    "posterior_probe",
)


def _small(**kwargs):
    return StackedCapsuleAutoencoder(**{**scae_cases.SMALL_MODEL, **kwargs})


def _images(batch=3, size=28, seed=0):
    return scae_cases.images(batch=batch, size=size, seed=seed)


def _numpy(outputs):
    return {k: ops.convert_to_numpy(v) for k, v in outputs.items()}


def _assert_same_outputs(test, a, b, atol=0.0):
    test.assertEqual(set(a), set(b))
    for name in a:
        test.assertAllClose(a[name], b[name], atol=atol, rtol=atol, msg=name)


class StackedCapsuleAutoencoderTest(TestCase):
    @pytest.mark.primary_backend
    def test_official_parameter_count(self):
        model = StackedCapsuleAutoencoder.from_preset("scae_mnist")
        for name in ("part_encoder", "template_decoder"):
            self.assertEqual(
                model.get_layer(name).count_params(),
                scae_cases.official_count(name),
                name,
            )
        self.assertEqual(
            model.get_layer("object_encoder").count_params(),
            scae_cases.official_count("object_encoder"),
        )
        self.assertEqual(
            model.get_layer("object_decoder").count_params(),
            scae_cases.official_count("object_decoder"),
        )
        total = sum(
            scae_cases.official_count(n) for n in scae_cases.OFFICIAL_SHAPES
        )
        self.assertEqual(total, 3_540_823)
        self.assertEqual(
            sum(int(np.prod(w.shape)) for w in model.trainable_weights), total
        )
        # Every kernel drawn as the official code draws it
        # (`initializers.FanInTruncatedNormal`): the same kernels, each of
        # the official fan-in.
        drawn = []
        for weight in model.weights:
            if not weight.path.endswith("kernel"):
                continue
            shape = tuple(weight.shape)
            if weight.path.startswith("object_decoder/"):
                fan_in = shape[-2]
            else:
                fan_in = math.prod(shape[:-1])
            drawn.append((shape, fan_in))
            values = ops.convert_to_numpy(weight)
            std = 1 / math.sqrt(fan_in)
            # Truncated at two standard deviations (Keras's PyTorch draw
            # keeps one of four normals inside, so about 4e-6 of its values
            # lie beyond).
            self.assertLess(
                np.mean(np.abs(values) > 2 * std), 1e-4, weight.path
            )
            self.assertAllClose(
                values.std(),
                scae_cases.TRUNCATED_STD * std,
                rtol=0.05 if values.size >= 4000 else 0.25,
                msg=weight.path,
            )
        self.assertEqual(sorted(drawn), sorted(scae_cases.official_fan_ins()))

    @pytest.mark.primary_backend
    def test_a_functional_model_whose_layers_are_reachable(self):
        model = _small()
        self.assertIsInstance(model, keras.Model)
        self.assertLessEqual(
            set(_LAYERS), {layer.name for layer in model.layers}
        )
        images = _images()
        # A sub-model from the images to every layer's output, as
        # `callbacks.CapsuleHealth` builds it.
        sub_model = keras.Model(
            model.input, [model.get_layer(name).output for name in _LAYERS]
        )
        outputs = sub_model(images)
        self.assertLen(outputs, len(_LAYERS))
        self.assertAllFinite(outputs)
        self.assertEqual(
            {k: tuple(v.shape) for k, v in model(images).items()}, _OUTPUTS
        )

    def test_fit_logs_every_term_and_labels_reach_only_the_probes(self):
        model = _small(noise_scale=0.0)
        model.compile(optimizer=keras.optimizers.SGD(0.1), **_COMPILE)
        x, y = _images(batch=4), np.array([0, 1, 2, 3])
        probes = {
            id(w)
            for name in ("prior_probe", "posterior_probe")
            for w in model.get_layer(name).weights
        }
        before = [ops.convert_to_numpy(w) for w in model.weights]
        history = model.fit(x, y, batch_size=4, verbose=0).history
        with_labels = [ops.convert_to_numpy(w) for w in model.weights]
        for w, value in zip(model.weights, before):
            w.assign(value)
        unlabelled = model.fit(x, batch_size=4, verbose=0).history
        without = [ops.convert_to_numpy(w) for w in model.weights]
        terms = (
            "image_log_likelihood",
            "part_log_likelihood",
            "dynamic_l2",
            "prior_within_sparsity",
            "prior_between_sparsity",
            "posterior_within_sparsity",
            "posterior_between_sparsity",
        )
        probe_terms = (
            "prior_probe_loss",
            "posterior_probe_loss",
            "prior_probe_accuracy",
            "posterior_probe_accuracy",
        )
        self.assertEqual(set(history), {"loss"} | set(terms + probe_terms))
        self.assertEqual(set(unlabelled), {"loss"} | set(terms))
        self.assertAllFinite([v[-1] for v in history.values()])
        for w, a, b, c in zip(model.weights, with_labels, without, before):
            if id(w) in probes:
                self.assertFalse(np.allclose(a, c), w.path)
                self.assertAllClose(b, c)
            else:
                # Float32 rounding of the two graphs' gradients (a label
                # reaching a weight would move it by about 0.1 g).
                self.assertAllClose(a, b, atol=1e-5, rtol=1e-5, msg=w.path)
        # `evaluate` logs the same values as `fit`.
        logs = model.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)
        self.assertEqual(set(logs), {"loss"} | set(terms + probe_terms))

    @pytest.mark.primary_backend
    def test_the_loss_is_the_public_loss_on_the_outputs(self):
        model = _small(noise_scale=0.0)
        x, y = _images(batch=4), np.array([0, 1, 2, 3])
        loss = StackedCapsuleAutoencoderLoss(dynamic_l2_weight=3.0)
        model.compile(
            optimizer=keras.optimizers.SGD(0.0), loss=loss, **_COMPILE
        )
        logs = model.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)
        expected = loss(y, model(x))
        self.assertAllClose(logs["loss"], expected, atol=1e-4, rtol=1e-5)

        # Any callable of (labels, outputs): its own terms are not logged.
        def likelihood_only(labels, outputs):
            return -ops.mean(outputs["image_log_likelihood"])

        model.compile(
            optimizer=keras.optimizers.SGD(0.0),
            loss=likelihood_only,
            **_COMPILE,
        )
        logs = model.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)
        self.assertEqual(set(logs), {"loss"})
        self.assertAllClose(
            logs["loss"], likelihood_only(y, model(x)), atol=1e-3, rtol=1e-5
        )

    @pytest.mark.primary_backend
    def test_one_compile_with_the_official_defaults(self):
        model = _small()
        model.compile(total_steps=100)
        optimizer = model.optimizer
        self.assertIsInstance(optimizer, RMSprop)
        self.assertAllClose(float(optimizer.learning_rate), 3e-5)
        self.assertEqual(optimizer.rho, 0.9)
        self.assertEqual(optimizer.momentum, 0.9)
        self.assertEqual(optimizer.initial_velocity, 1.0)
        self.assertAllClose(optimizer.epsilon, 1e-2 / 128**2)
        self.assertIsInstance(model.loss, StackedCapsuleAutoencoderLoss)
        self.assertEqual(
            model.loss.get_config(), model.default_loss().get_config()
        )

    @pytest.mark.primary_backend
    def test_the_fast_configuration_and_its_compile_defaults(self):
        entry = StackedCapsuleAutoencoder.presets["scae_mnist_fast"]
        self.assertFalse(entry["trained"])
        self.assertEqual(
            dict(entry["config"]),
            {"presence_masking": "log", "noise_scale": 1.0},
        )
        model = _small(presence_masking="log")
        model.compile(total_steps=100)
        optimizer = model.optimizer
        self.assertIsInstance(optimizer, RMSprop)
        self.assertEqual(optimizer.rho, 0.9)
        self.assertEqual(optimizer.momentum, 0.9)
        self.assertEqual(optimizer.initial_velocity, 1.0)
        self.assertAllClose(optimizer.epsilon, 1e-2 / 128**2)
        # 3e-4 reached linearly over 100 steps, then held.
        schedule = keras.optimizers.schedules.deserialize(
            optimizer.get_config()["learning_rate"]
        )
        steps = [0, 1, 50, 99, 100, 101, 5000, 300000]
        expected = [3e-4 * min(step, 100) / 100 for step in steps]
        self.assertAllClose(
            [float(schedule(step)) for step in steps], expected, rtol=1e-6
        )

    @pytest.mark.primary_backend
    def test_the_trained_preset_is_the_fast_configuration(self):
        def config(name):
            model = StackedCapsuleAutoencoder.from_preset(
                name, load_weights=False
            )
            return {
                key: value
                for key, value in model.get_config().items()
                if key not in ("name", "seed")
            }

        self.assertEqual(
            config("stacked_capsule_autoencoder_mnist"),
            config("scae_mnist_fast"),
        )

    @pytest.mark.primary_backend
    def test_compile_rejects_a_loss_it_cannot_use(self):
        model = _small()
        with self.assertRaisesRegex(ValueError, "loss='mse'"):
            model.compile(loss="mse")
        with self.assertRaisesRegex(ValueError, "loss=None"):
            model.compile(loss=None)
        with self.assertRaisesRegex(ValueError, "total_steps=10"):
            model.compile(optimizer="sgd", total_steps=10)
        with self.assertRaisesRegex(ValueError, "total_steps=0"):
            model.compile(total_steps=0)

    def test_predict_call_and_reconstruct_are_deterministic(self):
        images = _images()
        model = _small()
        quiet = StackedCapsuleAutoencoder.from_config(
            {**model.get_config(), "noise_scale": 0.0}
        )
        quiet.set_weights(model.get_weights())
        model.compile(**_COMPILE)
        quiet.compile(**_COMPILE)
        # Outside training, the outputs of the same weights without noise,
        # by the same path (predict compiled, a call eager).
        first = model.predict(images, verbose=0)
        _assert_same_outputs(self, first, model.predict(images, verbose=0))
        _assert_same_outputs(self, first, quiet.predict(images, verbose=0))
        _assert_same_outputs(self, _numpy(model(images)), _numpy(quiet(images)))
        self.assertAllClose(
            model.reconstruct(images), quiet.reconstruct(images), atol=0
        )

    def test_inference_noise_seed_gives_the_official_evaluation_twice(self):
        images = _images()
        model = _small()
        noisy = _small(inference_noise_seed=3)
        noisy.set_weights(model.get_weights())
        model.compile(**_COMPILE)
        noisy.compile(**_COMPILE)
        first = noisy.predict(images, verbose=0)
        _assert_same_outputs(self, first, noisy.predict(images, verbose=0))
        quiet = model.predict(images, verbose=0)
        self.assertFalse(
            np.allclose(first["object_presence"], quiet["object_presence"])
        )
        self.assertFalse(
            np.allclose(first["part_presence"], quiet["part_presence"])
        )

    def test_two_training_steps_draw_different_noise(self):
        # With a learning rate of 0 only the noise can change the loss.
        model = _small()
        model.compile(optimizer=keras.optimizers.SGD(0.0), **_COMPILE)
        x = _images(batch=4)
        first = model.train_on_batch(x, return_dict=True)["loss"]
        second = model.train_on_batch(x, return_dict=True)["loss"]
        self.assertNotAlmostEqual(float(first), float(second), places=3)

    def test_train_on_batch_runs_the_model_once_a_step(self):
        # Keras rebuilds an unbuilt compiled loss by running the model
        # again in every train_on_batch; the model's loss is its own.
        if keras.backend.backend() == "jax":
            # The same Keras code; JAX's eager steps take two minutes.
            self.skipTest("eager JAX is slow; PyTorch and TensorFlow test it")
        model = _small()
        model.compile(run_eagerly=True)
        x = _images()
        model.train_on_batch(x)
        calls = []
        call = model.template_decoder.call

        def counted(*args, **kwargs):
            calls.append(1)
            return call(*args, **kwargs)

        model.template_decoder.call = counted
        model.train_on_batch(x)
        model.test_on_batch(x)
        self.assertEqual(len(calls), 2)

    # Eager calls, which JAX compiles operation by operation (25 s there);
    # the image checks are the other models' too, which images_test.py
    # checks on TensorFlow and PyTorch.
    @pytest.mark.backends("tensorflow", "torch")
    def test_outputs_uint8_images_and_non_finite_pixels(self):
        model = _small()
        outputs = model(_images())
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

    # Eager calls, which JAX compiles operation by operation (27 to 84 s
    # there). The config round trip is the same code on every backend;
    # JAX writes and restores the weights and optimizer state in the
    # state test (`BackupAndRestore`).
    @pytest.mark.backends("tensorflow", "torch")
    def test_keras_file_round_trip(self):
        model = _small(part_head_layout="per_capsule")
        # Weights a model of the same seed does not start from.
        rng = np.random.default_rng(1)
        for weight in model.trainable_weights:
            noise = rng.normal(0, 0.01, weight.shape).astype("float32")
            weight.assign(weight + noise)
        model.compile(loss=StackedCapsuleAutoencoderLoss(dynamic_l2_weight=2.0))
        path = os.path.join(self.get_temp_dir(), "scae.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
        self.assertIs(type(loaded), StackedCapsuleAutoencoder)
        self.assertEqual(loaded.get_config(), model.get_config())
        _assert_same_outputs(
            self, _numpy(loaded(_images())), _numpy(model(_images()))
        )
        self.assertIsInstance(loaded.optimizer, RMSprop)
        self.assertEqual(loaded.loss.get_config(), model.loss.get_config())

    @pytest.mark.primary_backend
    def test_preset_round_trip(self):
        model = _small(presence_masking="log")
        path = os.path.join(self.get_temp_dir(), "preset")
        model.save_to_preset(path)
        loaded = StackedCapsuleAutoencoder.from_preset(path)
        for a, b in zip(loaded.get_weights(), model.get_weights()):
            np.testing.assert_array_equal(a, b)
        _assert_same_outputs(
            self, _numpy(loaded(_images())), _numpy(model(_images()))
        )

    @pytest.mark.primary_backend
    def test_files_saved_before_1_0_load(self):
        # Saved by the subclassed model (tests/models/fixtures/README.md):
        # old argument names and option values, the loss weights in the
        # model's config, `compile(loss=None)`.
        saved = np.load(os.path.join(_FIXTURES, "scae_0_1_outputs.npz"))
        images = saved["images"]
        loaded = keras.models.load_model(
            os.path.join(_FIXTURES, "scae_0_1.keras")
        )
        preset = StackedCapsuleAutoencoder.from_preset(
            os.path.join(_FIXTURES, "scae_0_1_preset")
        )
        for model in (loaded, preset):
            config = model.get_config()
            self.assertEqual(config["num_object_capsules"], 4)
            self.assertEqual(config["object_capsule_dim"], 8)
            self.assertEqual(config["part_head_layout"], "per_capsule")
            self.assertEqual(config["presence_masking"], "log")
            outputs = _numpy(model(images))
            for name, value in outputs.items():
                self.assertAllClose(
                    value, saved[name], atol=1e-5, rtol=1e-5, msg=name
                )
        self.assertIsInstance(loaded.loss, StackedCapsuleAutoencoderLoss)
        self.assertIsInstance(loaded.optimizer, RMSprop)

    @pytest.mark.primary_backend
    def test_an_old_config_with_other_loss_weights_names_them(self):
        config = _small().get_config()
        config["dynamic_l2_weight"] = 5.0
        config["num_objects"] = config.pop("num_object_capsules")
        with self.assertRaisesRegex(
            ValueError, "StackedCapsuleAutoencoderLoss.*dynamic_l2_weight=5.0"
        ):
            StackedCapsuleAutoencoder.from_config(config)
        config["dynamic_l2_weight"] = 10.0
        model = StackedCapsuleAutoencoder.from_config(config)
        self.assertEqual(model.num_object_capsules, 4)

    @pytest.mark.backends("tensorflow", "torch")
    def test_mixed_precision_loss_is_within_tolerance_of_float32(self):
        # The likelihoods are summed in float32 and the loss's terms
        # accumulated in float32; the loss stays within 5e-3 of float32's,
        # relative (seen: at most 2e-3 under bfloat16, 4e-5 under float16).
        # Compiled (`predict`): JAX compiles a network faster than it runs
        # it eagerly the first time.
        x, y = _images(batch=8), np.arange(8)
        reference = _small()
        reference.compile(**_COMPILE)
        loss = StackedCapsuleAutoencoderLoss()
        expected = ops.convert_to_numpy(
            loss(y, reference.predict(x, verbose=0))
        )
        previous = keras.config.dtype_policy()
        self.addCleanup(keras.config.set_dtype_policy, previous)
        # bfloat16, the coarser of the two mixed policies (float16 is
        # checked layer by layer in tests/layers/dtype_test.py).
        keras.config.set_dtype_policy("mixed_bfloat16")
        model = _small()
        keras.config.set_dtype_policy(previous)
        model.set_weights(reference.get_weights())
        model.compile(**_COMPILE)
        outputs = model.predict(x, verbose=0)
        self.assertEqual(outputs["image_log_likelihood"].dtype, "float32")
        value = ops.convert_to_numpy(loss(y, outputs))
        self.assertEqual(value.dtype, "float32")
        self.assertAllClose(value, expected, atol=0, rtol=5e-3)

    def test_reconstruct(self):
        model = _small()
        reconstruction, parts = model.reconstruct(_images(), return_parts=True)
        self.assertEqual(tuple(reconstruction.shape), (3, 28, 28, 1))
        self.assertEqual(tuple(parts.shape), (3, 28, 28, 1))
        self.assertAllFinite(reconstruction)

    @pytest.mark.primary_backend
    def test_rejects_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "presence_masking"):
            _small(presence_masking="official")
        with self.assertRaisesRegex(ValueError, "part_head_layout"):
            _small(part_head_layout="official")
        with self.assertRaisesRegex(ValueError, "inference_noise_seed"):
            _small(inference_noise_seed=-2)
        with self.assertRaisesRegex(ValueError, "image_shape"):
            _small(image_shape=(28, 28))
        with self.assertRaisesRegex(ValueError, "num_object_capsules"):
            _small(num_object_capsules=0)


class PresetNamesTest(TestCase):
    @pytest.mark.primary_backend
    def test_every_preset_name_is_unique_across_the_models(self):
        seen = {}
        for cls in (
            CapsNet,
            EfficientCapsNet,
            MatrixCapsNet,
            StackedCapsuleAutoencoder,
        ):
            for name in cls.presets:
                self.assertNotIn(name, seen, f"{cls.__name__} and {seen}")
                seen[name] = cls.__name__
        self.assertEqual(seen["scae_mnist"], "StackedCapsuleAutoencoder")
