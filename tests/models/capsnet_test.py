import json
import os
import re
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules.layers import DenseCaps
from keras_capsules.layers import Length
from keras_capsules.layers import PrimaryCaps
from keras_capsules.losses import MarginLoss
from keras_capsules.models import CapsNet
from keras_capsules.testing import TestCase
from tests import references
from tests.models.inference_loss import inference_loss

# Small enough to compile and train in seconds on any backend, with every
# size different from the others so that shape mix-ups fail.
SMALL_CONFIG = {
    "image_shape": (20, 20, 3),
    "num_classes": 4,
    "routing_iterations": 2,
    "conv_filters": 8,
    "conv_kernel_size": 5,
    "num_primary_capsules": 3,
    "primary_capsule_dim": 5,
    "primary_kernel_size": 5,
    "primary_strides": 2,
    "capsule_dim": 6,
    "decoder_units": (16,),
    "reconstruction_weight": 0.01,
}


def _schedule(optimizer):
    """The learning-rate schedule of `optimizer`, rebuilt from its config."""
    return keras.optimizers.schedules.deserialize(
        optimizer.get_config()["learning_rate"]
    )


def _held_cosine(steps, total_steps):
    """NumPy: `CapsNet.compile(total_steps)`'s rate at `steps`, 1e-3 for the
    first `round(0.8 * total_steps)` steps (at most `total_steps - 1`), then
    a cosine to zero over the rest."""
    held = min(round(0.8 * total_steps), total_steps - 1)
    done = np.clip((steps - held) / (total_steps - held), 0.0, 1.0)
    return np.where(steps < held, 1e-3, 0.5e-3 * (1 + np.cos(np.pi * done)))


def _data(batch=8, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(batch,) + SMALL_CONFIG["image_shape"])
    y = np.eye(SMALL_CONFIG["num_classes"], dtype="float32")[
        np.arange(batch) % SMALL_CONFIG["num_classes"]
    ]
    return x.astype("float32"), y


def _numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x), dtype="float64")


def _pairs(batch=6, seed=0):
    """Two objects of different classes per image, as multi_mnist makes."""
    rng = np.random.default_rng(seed)
    num_classes = SMALL_CONFIG["num_classes"]
    first = np.arange(batch) % num_classes
    second = (first + 1 + np.arange(batch) % (num_classes - 1)) % num_classes
    object_labels = np.eye(num_classes, dtype="float32")[
        np.stack([first, second], axis=1)
    ]
    objects = rng.uniform(size=(batch, 2) + SMALL_CONFIG["image_shape"]).astype(
        "float32"
    )
    x = np.minimum(objects.sum(axis=1), 1.0)
    y = {
        "labels": object_labels.sum(axis=1),
        "object_labels": object_labels,
        "objects": objects,
    }
    return x, y


class CapsNetTest(TestCase):
    @pytest.mark.primary_backend
    def test_paper_parameter_counts(self):
        model = CapsNet()
        counts = {layer.name: layer.count_params() for layer in model.layers}
        self.assertEqual(counts["conv1"], 20_992)
        self.assertEqual(counts["primary_caps"], 5_308_672)
        self.assertEqual(counts["digit_caps"], 1_474_560)
        self.assertEqual(model.decoder.count_params(), 1_411_344)
        self.assertEqual(model.count_params(), 8_215_568)
        # The encoder alone, as in CapsNet(decoder_units=None).
        self.assertEqual(sum(counts.values()), 6_804_224)
        self.assertEqual(model.input_shape, (None, 28, 28, 1))
        self.assertEqual(model.output_shape, (None, 10))
        self.assertEqual(
            model.get_layer("primary_caps").output.shape, (None, 1152, 8)
        )

    @pytest.mark.primary_backend
    def test_graph(self):
        model = CapsNet(**SMALL_CONFIG)
        self.assertIsInstance(model.get_layer("primary_caps"), PrimaryCaps)
        self.assertIsInstance(model.get_layer("digit_caps"), DenseCaps)
        self.assertIsInstance(model.get_layer("length"), Length)
        self.assertEqual(
            model.get_layer("primary_caps").output.shape, (None, 6 * 6 * 3, 5)
        )
        self.assertEqual(
            model.get_layer("digit_caps").output.shape, (None, 4, 6)
        )
        self.assertEqual(model.get_layer("digit_caps").routing_iterations, 2)
        self.assertEqual(
            [w.shape for w in model.decoder.weights],
            [(24, 16), (16,), (16, 1200), (1200,)],
        )

    @parameterized.named_parameters(("batch_1", 1), ("batch_5", 5))
    @pytest.mark.primary_backend
    def test_any_batch_size(self, batch):
        model = CapsNet(**SMALL_CONFIG)
        x, y = _data(batch)
        lengths = _numpy(model(x))
        self.assertEqual(lengths.shape, (batch, 4))
        self.assertTrue(np.all((lengths >= 0) & (lengths < 1)))
        self.assertEqual(tuple(model.reconstruct(x).shape), x.shape)
        self.assertEqual(tuple(model.reconstruct(x, y).shape), x.shape)

    @pytest.mark.primary_backend
    def test_reconstruct_checks_the_label_width(self):
        model = CapsNet(**SMALL_CONFIG)
        x, _ = _data(2)
        for labels in (np.eye(5)[[0, 1]], np.ones((2,))):
            with self.assertRaisesRegex(
                ValueError,
                r"y must hold labels of shape \(batch_size, num_classes\) "
                r"or \(batch_size, K, num_classes\), with num_classes=4\. "
                rf"Received: y\.shape={re.escape(str(labels.shape))}$",
            ):
                model.reconstruct(x, labels)
        with self.assertRaisesRegex(ValueError, r"Received: y\.shape"):
            model.decode(model.class_capsules(x), np.eye(5)[[0, 1]])

    @pytest.mark.primary_backend
    def test_default_optimizer_follows_the_run_length(self):
        model = CapsNet(**SMALL_CONFIG)
        schedules = keras.optimizers.schedules
        unknown = _schedule(model.default_optimizer())
        self.assertIsInstance(unknown, schedules.ExponentialDecay)
        self.assertEqual(
            (
                unknown.initial_learning_rate,
                unknown.decay_steps,
                unknown.decay_rate,
            ),
            (1e-3, 2000, 0.96),
        )
        for total_steps in (1, 2, 72, 100):
            known = _schedule(model.default_optimizer(total_steps))
            self.assertIsInstance(known, schedules.CosineDecay)
            steps = np.arange(total_steps + 1)
            self.assertAllClose(
                np.array([float(known(step)) for step in steps]),
                _held_cosine(steps, total_steps),
                atol=1e-9,
            )
        with self.assertRaisesRegex(ValueError, r"Received: total_steps=0$"):
            model.default_optimizer(total_steps=0)

    def test_known_length_schedule_inside_compiled_fit(self):
        # 10 steps: 1e-3 for 8, then the cosine's 2 (NumPy, `_held_cosine`).
        model = CapsNet(**SMALL_CONFIG)
        model.compile(total_steps=10)
        x, y = _data(8)
        rates = []

        class Rates(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                rates.append(float(self.model.optimizer.learning_rate))

        model.fit(x, y, batch_size=1, epochs=1, callbacks=[Rates()], verbose=0)
        model.fit(x[:2], y[:2], batch_size=1, callbacks=[Rates()], verbose=0)
        self.assertEqual(int(model.optimizer.iterations), 10)
        self.assertAllClose(
            np.array(rates), _held_cosine(np.arange(10), 10), atol=1e-9
        )

    def test_reconstruct(self):
        model = CapsNet(**SMALL_CONFIG)
        x, y = _data(4)
        capsules = model.digit_caps(model.primary_caps(model.conv1(x)))
        lengths = _numpy(model.length(capsules))
        by_label = np.einsum("bc,bcd->bcd", y, _numpy(capsules))
        predicted = np.eye(4)[lengths.argmax(-1)]
        by_prediction = np.einsum("bc,bcd->bcd", predicted, _numpy(capsules))
        for masked, labels in ((by_label, y), (by_prediction, None)):
            expected = _numpy(model.decoder(masked.reshape(4, -1)))
            got = _numpy(model.reconstruct(x, labels))
            self.assertAllClose(got, expected, atol=1e-5)
            self.assertTrue(np.all((got >= 0) & (got <= 1)))
        self.assertFalse(
            np.allclose(
                _numpy(model.reconstruct(x, y[::-1])),
                _numpy(model.reconstruct(x, y)),
            )
        )

    @pytest.mark.backends("tensorflow", "torch")
    def test_compute_loss_adds_label_masked_reconstruction(self):
        model = CapsNet(**SMALL_CONFIG)
        model.compile()
        x, y = _data(4)
        weights = np.array([1.0, 0.0, 2.0, 0.5], dtype="float32")
        lengths = _numpy(model.predict(x, verbose=0))
        errors = ((_numpy(model.reconstruct(x, y)) - x) ** 2).reshape(4, -1)
        expected = np.mean(
            weights
            * (references.margin_loss(y, lengths) + 0.01 * errors.sum(-1))
        )
        loss = inference_loss(model, x, y, lengths.astype("float32"), weights)
        self.assertAllClose(loss, expected, atol=1e-5, rtol=1e-5)

    def test_fit_evaluate_save_load(self):
        model = CapsNet(**SMALL_CONFIG)
        # Paper optimizer and loss; XLA on TensorFlow (JAX always jits).
        model.compile()
        self.assertIsInstance(model.loss, MarginLoss)
        x, y = _data(8)
        decoder_before = [_numpy(w) for w in model.decoder.weights]
        history = model.fit(x, y, batch_size=4, epochs=2, verbose=0)
        for key in ("loss", "accuracy", "reconstruction_loss"):
            self.assertLen(history.history[key], 2)
            self.assertTrue(np.all(np.isfinite(history.history[key])))
        self.assertLess(history.history["loss"][-1], history.history["loss"][0])
        self.assertGreater(history.history["reconstruction_loss"][0], 0.0)
        # The reconstruction loss trains the decoder.
        for before, after in zip(decoder_before, model.decoder.weights):
            self.assertFalse(np.allclose(before, _numpy(after)))
        self.assertEqual(int(model.optimizer.iterations), 4)

        logs = model.evaluate(x, y, verbose=0, return_dict=True)
        self.assertEqual(set(logs), {"loss", "accuracy", "reconstruction_loss"})

        loaded = self.run_model_saving_test(model, x, layer_cls=DenseCaps)
        self.assertIsInstance(loaded, CapsNet)
        self.assertEqual(loaded.get_config(), model.get_config())
        self.assertAllClose(
            loaded.reconstruct(x), model.reconstruct(x), atol=1e-5
        )
        # Compilation and optimizer state come back with the file.
        self.assertIsInstance(loaded.loss, MarginLoss)
        self.assertIsInstance(loaded.optimizer, keras.optimizers.Adam)
        self.assertEqual(
            loaded.optimizer.get_config()["learning_rate"]["class_name"],
            "ExponentialDecay",
        )
        self.assertEqual(int(loaded.optimizer.iterations), 4)
        history = loaded.fit(x, y, batch_size=8, epochs=1, verbose=0)
        self.assertTrue(np.isfinite(history.history["loss"][0]))

    @pytest.mark.primary_backend
    def test_two_objects_fit_evaluate_reconstruct(self):
        model = CapsNet(**SMALL_CONFIG, num_objects=2)
        model.compile()
        (metric,) = model.get_compile_config()["metrics"]
        self.assertEqual(
            metric["registered_name"], "keras_capsules>TopKExactMatch"
        )
        self.assertEqual(metric["config"]["k"], 2)
        x, y = _pairs(8)
        history = model.fit(x, y, batch_size=4, epochs=2, verbose=0)
        self.assertLess(history.history["loss"][-1], history.history["loss"][0])
        logs = model.evaluate(x, y, verbose=0, return_dict=True)
        self.assertEqual(set(logs), {"loss", "accuracy", "reconstruction_loss"})
        # One reconstruction per object: of the two longest capsules, or of
        # the given labels.
        shape = (8, 2) + SMALL_CONFIG["image_shape"]
        self.assertEqual(tuple(model.reconstruct(x).shape), shape)
        by_label = model.reconstruct(x, y["object_labels"])
        self.assertEqual(tuple(by_label.shape), shape)
        capsules = model.class_capsules(x)
        self.assertAllClose(
            model.decode(capsules, y["object_labels"]), by_label, atol=1e-6
        )
        self.assertAllClose(
            by_label[:, 1],
            model.reconstruct(x, y["object_labels"][:, 1]),
            atol=1e-6,
        )
        # The option travels with the config, so with `.keras` files.
        revived = CapsNet.from_config(model.get_config())
        self.assertEqual(revived.num_objects, 2)

    def test_two_object_loss_sums_both_reconstructions(self):
        model = CapsNet(**SMALL_CONFIG, num_objects=2)
        model.compile()
        x, y = _pairs(4)
        lengths = _numpy(model.predict(x, verbose=0))
        reconstructions = _numpy(model.reconstruct(x, y["object_labels"]))
        errors = ((reconstructions - y["objects"]) ** 2).reshape(4, -1)
        expected = np.mean(
            references.margin_loss(y["labels"], lengths) + 0.01 * errors.sum(-1)
        )
        loss = model.compute_loss(
            x=keras.ops.convert_to_tensor(x),
            y={k: keras.ops.convert_to_tensor(v) for k, v in y.items()},
            y_pred=keras.ops.convert_to_tensor(lengths.astype("float32")),
            training=False,
        )
        self.assertAllClose(loss, expected, atol=1e-5, rtol=1e-5)

    @pytest.mark.primary_backend
    def test_two_objects_need_dict_targets(self):
        model = CapsNet(**SMALL_CONFIG, num_objects=2)
        model.compile()
        x, y = _pairs(4)
        with self.assertRaisesRegex(
            ValueError, r"dict of .*Received: type\(y\)"
        ):
            model.compute_loss(x=x, y=y["labels"], y_pred=None)
        with self.assertRaisesRegex(ValueError, r"objects.shape=\(4, 2, 20"):
            model.compute_loss(
                x=x, y=dict(y, objects=y["objects"][..., 0]), y_pred=None
            )
        del y["objects"]
        with self.assertRaisesRegex(ValueError, r"lack objects"):
            model.compute_loss(x=x, y=y, y_pred=None)
        # Without a decoder, the labels alone train the model.
        model = CapsNet(**dict(SMALL_CONFIG, decoder_units=None), num_objects=2)
        model.compile()
        history = model.fit(x, y["labels"], batch_size=4, verbose=0)
        self.assertTrue(np.isfinite(history.history["accuracy"][0]))

    @pytest.mark.primary_backend
    def test_compile_defaults_and_overrides(self):
        model = CapsNet(**SMALL_CONFIG)
        model.compile()
        self.assertIsInstance(model.optimizer, keras.optimizers.Adam)
        schedule = keras.optimizers.schedules.deserialize(
            model.optimizer.get_config()["learning_rate"]
        )
        self.assertEqual(
            {
                k: schedule.get_config()[k]
                for k in (
                    "initial_learning_rate",
                    "decay_steps",
                    "decay_rate",
                    "staircase",
                )
            },
            {
                "initial_learning_rate": 1e-3,
                "decay_steps": 2000,
                "decay_rate": 0.96,
                "staircase": False,
            },
        )
        self.assertIsInstance(model.loss, MarginLoss)
        loss = MarginLoss(reduction_over_classes="mean")
        model.compile(optimizer="sgd", loss=loss, metrics=[])
        self.assertIsInstance(model.optimizer, keras.optimizers.SGD)
        self.assertIs(model.loss, loss)

    @pytest.mark.primary_backend
    def test_without_decoder(self):
        config = dict(SMALL_CONFIG, decoder_units=None)
        model = CapsNet(**config)
        self.assertIsNone(model.decoder)
        model.compile(optimizer="adam")
        x, y = _data(4)
        lengths = _numpy(model.predict(x, verbose=0))
        loss = model.compute_loss(
            x=x,
            y=keras.ops.convert_to_tensor(y),
            y_pred=keras.ops.convert_to_tensor(lengths.astype("float32")),
        )
        self.assertAllClose(
            loss, np.mean(references.margin_loss(y, lengths)), atol=1e-6
        )
        history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        self.assertNotIn("reconstruction_loss", history.history)
        with self.assertRaisesRegex(
            ValueError, r"no decoder.*Received: decoder_units=None"
        ):
            model.reconstruct(x)
        self.assertEqual(
            CapsNet.from_config(model.get_config()).get_config(),
            model.get_config(),
        )

    @pytest.mark.primary_backend
    def test_config_round_trip(self):
        model = CapsNet(**SMALL_CONFIG, name="small_capsnet")
        config = model.get_config()
        self.assertEqual(
            config,
            dict(
                SMALL_CONFIG,
                name="small_capsnet",
                trainable=True,
                leaky_routing=False,
                stop_gradient=False,
                routing_bias=False,
                num_objects=1,
            ),
        )
        # Through JSON, as in a `.keras` file: tuples become lists.
        revived = CapsNet.from_config(json.loads(json.dumps(config)))
        self.assertIsInstance(revived, CapsNet)
        self.assertEqual(revived.get_config(), config)
        serialized = keras.saving.serialize_keras_object(model)
        self.assertEqual(
            serialized["registered_name"], "keras_capsules>CapsNet"
        )

    @parameterized.named_parameters(
        ("float16", "mixed_float16"), ("bfloat16", "mixed_bfloat16")
    )
    @pytest.mark.backends("tensorflow", "torch")
    def test_mixed_precision(self, policy):
        original = keras.config.dtype_policy()
        keras.config.set_dtype_policy(policy)
        self.addCleanup(keras.config.set_dtype_policy, original)
        model = CapsNet(**SMALL_CONFIG)
        model.compile()
        x, y = _data(4)
        lengths = model(x)
        self.assertEqual(
            keras.backend.standardize_dtype(lengths.dtype),
            policy.split("_")[1],
        )
        self.assertAllFinite(lengths)
        loss = model.compute_loss(
            x=keras.ops.convert_to_tensor(x),
            y=keras.ops.convert_to_tensor(y),
            y_pred=lengths,
            training=False,
        )
        self.assertEqual(keras.backend.standardize_dtype(loss.dtype), "float32")
        self.assertAllFinite(loss)
        self.assertAllFinite(model.reconstruct(x, y))

    @parameterized.named_parameters(
        (
            "input_rank",
            {"image_shape": (28, 28)},
            r"image_shape must be a "
            r"tuple of 3 positive integers.*Received: image_shape=\(28, 28\)$",
        ),
        (
            "input_type",
            {"image_shape": (28, 28.0, 1)},
            r"Received: image_shape=\(28, 28\.0, 1\)$",
        ),
        (
            "num_classes",
            {"num_classes": 0},
            r"num_classes must be a positive integer\. "
            r"Received: num_classes=0",
        ),
        (
            "routing",
            {"routing_iterations": True},
            r"Received: routing_iterations=True",
        ),
        (
            "decoder_units",
            {"decoder_units": (16, 0)},
            r"decoder_units must be None .*Received: decoder_units=\(16, 0\)",
        ),
        (
            "reconstruction_weight",
            {"reconstruction_weight": -0.1},
            r"non-negative number\. Received: reconstruction_weight=-0\.1",
        ),
        (
            "too_small",
            {"image_shape": (8, 12, 1)},
            r"too small .*at least 9.*Received: image_shape=\(8, 12, 1\)$",
        ),
        (
            "num_objects",
            {"num_objects": 5},
            r"at most num_classes \(4\).*Received: num_objects=5",
        ),
    )
    @pytest.mark.primary_backend
    def test_invalid_arguments(self, kwargs, pattern):
        config = dict(SMALL_CONFIG, **kwargs)
        with self.assertRaisesRegex(ValueError, pattern):
            CapsNet(**config)

    @pytest.mark.primary_backend
    def test_routing_options_reach_digit_caps(self):
        options = {
            "leaky_routing": True,
            "stop_gradient": True,
            "routing_bias": True,
        }
        model = CapsNet(**SMALL_CONFIG, **options)
        digit_caps = model.get_layer("digit_caps")
        self.assertIs(model.digit_caps, digit_caps)
        self.assertTrue(digit_caps.leaky_routing)
        self.assertTrue(digit_caps.stop_gradient)
        self.assertTrue(digit_caps.use_bias)
        # The official bias adds num_classes x capsule_dim weights.
        self.assertEqual(
            digit_caps.count_params(),
            CapsNet(**SMALL_CONFIG).digit_caps.count_params() + 4 * 6,
        )
        config = model.get_config()
        self.assertEqual({k: config[k] for k in options}, options)
        revived = CapsNet.from_config(json.loads(json.dumps(config)))
        self.assertEqual(revived.get_config(), config)
        self.assertTrue(revived.digit_caps.leaky_routing)
        self.assertTrue(revived.digit_caps.stop_gradient)
        self.assertTrue(revived.digit_caps.use_bias)
        # The defaults are the paper's: no leak, no stop, no bias.
        plain = CapsNet(**SMALL_CONFIG).digit_caps
        self.assertEqual(
            (plain.leaky_routing, plain.stop_gradient, plain.use_bias),
            (False, False, False),
        )
        x, y = _data(4)
        model.compile()
        history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        self.assertTrue(np.isfinite(history.history["loss"][0]))

    @parameterized.named_parameters(
        ("leaky_routing", "leaky_routing"),
        ("stop_gradient", "stop_gradient"),
        ("routing_bias", "routing_bias"),
    )
    @pytest.mark.primary_backend
    def test_routing_options_must_be_booleans(self, name):
        with self.assertRaisesRegex(
            TypeError, rf"{name} must be a boolean.*Received: {name}=yes$"
        ):
            CapsNet(**SMALL_CONFIG, **{name: "yes"})

    @pytest.mark.primary_backend
    def test_presets_list_the_trained_network(self):
        # No architecture presets: its one preset is the trained network
        # shipped with the package.
        self.assertEqual(set(CapsNet.presets), {"capsnet_mnist"})
        entry = CapsNet.presets["capsnet_mnist"]
        self.assertTrue(entry["trained"])
        self.assertEqual(entry["class_name"], "CapsNet")
        with self.assertRaisesRegex(
            ValueError, 'preset must be "capsnet_mnist".*Received: preset=mnist'
        ):
            CapsNet.from_preset("mnist")

    @pytest.mark.large
    def test_tensorflow_file_loads_on_jax(self):
        # Write with one backend, read with another, each in a fresh
        # interpreter (the backend is fixed at import time).
        directory = self.get_temp_dir()
        write = textwrap.dedent(
            f"""
            import numpy as np
            import keras
            from keras_capsules.models import CapsNet
            keras.utils.set_random_seed(0)
            model = CapsNet(**{SMALL_CONFIG!r})
            model.compile(jit_compile=True)
            x = np.random.default_rng(0).uniform(
                size=(4, 20, 20, 3)).astype("float32")
            y = np.eye(4, dtype="float32")
            model.fit(x, y, epochs=1, verbose=0)
            np.save(r"{directory}/x.npy", x)
            np.save(r"{directory}/lengths.npy", model.predict(x, verbose=0))
            np.save(r"{directory}/images.npy",
                    keras.ops.convert_to_numpy(model.reconstruct(x)))
            model.save(r"{directory}/capsnet.keras")
            """
        )
        read = textwrap.dedent(
            f"""
            import numpy as np
            import keras
            import keras_capsules  # Registers the classes; nothing else.
            model = keras.models.load_model(r"{directory}/capsnet.keras")
            x = np.load(r"{directory}/x.npy")
            np.testing.assert_allclose(
                model.predict(x, verbose=0),
                np.load(r"{directory}/lengths.npy"), atol=1e-5)
            np.testing.assert_allclose(
                keras.ops.convert_to_numpy(model.reconstruct(x)),
                np.load(r"{directory}/images.npy"), atol=1e-5)
            print(type(model).__name__, keras.backend.backend())
            """
        )
        for backend, script in (("tensorflow", write), ("jax", read)):
            env = dict(os.environ, KERAS_BACKEND=backend)
            result = subprocess.run(
                [sys.executable, "-c", script],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertIn("CapsNet jax", result.stdout)
