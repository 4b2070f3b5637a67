import os

import keras
import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules.callbacks import SpreadMarginScheduler
from keras_capsules.layers import EMClassCaps
from keras_capsules.layers import EMConvCaps
from keras_capsules.layers import PrimaryMatrixCaps
from keras_capsules.losses import SpreadLoss
from keras_capsules.models import MatrixCapsNet
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references
from tests.compiled import compiled

# One tiny configuration everywhere (the "tiny" preset's sizes): on JAX
# every new weight shape costs an XLA compilation of its initializer.
_TINY = {
    "image_shape": (24, 24, 1),
    "num_classes": 5,
    **MatrixCapsNet.presets["tiny"]["config"],
    "routing_iterations": 1,
}


def _data(batch=8, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, size=(batch,) + _TINY["image_shape"])
    y = np.eye(5, dtype="float32")[np.arange(batch) % 5]
    return x.astype("float32"), y


def _schedule(optimizer):
    """The learning-rate schedule of `optimizer`, rebuilt from its config."""
    return keras.optimizers.schedules.deserialize(
        optimizer.get_config()["learning_rate"]
    )


class MatrixCapsNetTest(TestCase):
    @pytest.mark.primary_backend
    def test_parameter_counts_match_the_paper(self):
        paper = MatrixCapsNet.from_preset("full")
        trainable = sum(int(np.prod(w.shape)) for w in paper.trainable_weights)
        # Conv1 832 + PrimaryCaps 17,952 + 2 x ConvCaps 147,520 +
        # ClassCaps 2,570; "310K" in the paper.
        self.assertEqual(trainable, 316_394)
        self.assertBetween(paper.count_params(), 310_000, 317_000)
        small = MatrixCapsNet.from_preset("small")
        # "68K" in the paper.
        self.assertEqual(
            sum(int(np.prod(w.shape)) for w in small.trainable_weights),
            67_154,
        )

    @pytest.mark.primary_backend
    def test_presets(self):
        full = MatrixCapsNet.presets["full"]
        self.assertEqual(
            dict(full["config"]), {"A": 32, "B": 32, "C": 32, "D": 32}
        )
        self.assertEqual(full["class_name"], "MatrixCapsNet")
        self.assertFalse(full["trained"])
        self.assertIn("310K", full["description"])
        self.assertEqual(
            dict(MatrixCapsNet.presets["small"]["config"]),
            {"A": 64, "B": 8, "C": 16, "D": 16},
        )
        self.assertEqual(MatrixCapsNet().get_config()["A"], 32)
        with self.assertRaises(TypeError):
            MatrixCapsNet.presets["small"]["trained"] = True
        with self.assertRaises(TypeError):
            MatrixCapsNet.presets["huge"] = {}
        # Changing a listed config changes neither the listing nor the
        # architecture `from_preset` builds.
        MatrixCapsNet.presets["small"]["config"]["A"] = 1
        self.assertEqual(MatrixCapsNet.presets["small"]["config"]["A"], 64)
        model = MatrixCapsNet.from_preset(
            "tiny", image_shape=(24, 24, 1), num_classes=3, D=2
        )
        config = model.get_config()
        self.assertEqual(
            [config[name] for name in ("A", "B", "C", "D", "num_classes")],
            [8, 4, 4, 2, 3],
        )
        with self.assertRaisesRegex(
            ValueError, "Argument preset must be.*Received: preset=huge"
        ):
            MatrixCapsNet.from_preset("huge")

    @pytest.mark.primary_backend
    def test_architecture(self):
        model = MatrixCapsNet(**_TINY)
        self.assertEqual(
            [type(layer) for layer in model.layers[1:]],
            [
                keras.layers.Conv2D,
                PrimaryMatrixCaps,
                EMConvCaps,
                EMConvCaps,
                EMClassCaps,
            ],
        )
        self.assertEqual(model.conv1.strides, (2, 2))
        self.assertEqual(model.conv_caps1.strides, (2, 2))
        self.assertEqual(model.conv_caps2.strides, (1, 1))
        self.assertTrue(model.class_caps.coordinate_addition)
        self.assertEqual(tuple(model.output.shape), (None, 5))
        self.assertEqual(
            tuple(model.conv_caps2.output[0].shape), (None, 2, 2, 4, 4, 4)
        )

    def test_predict_and_class_capsules(self):
        model = MatrixCapsNet(**_TINY)
        x, _ = _data(3)
        activations = model.predict(x, verbose=0)
        self.assertEqual(activations.shape, (3, 5))
        self.assertAllFinite(activations)
        self.assertTrue(np.all((activations >= 0) & (activations <= 1)))
        poses, class_activations = compiled(model.class_capsules)(x)
        self.assertEqual(tuple(poses.shape), (3, 5, 4, 4))
        self.assertAllFinite(poses)
        self.assertAllClose(class_activations, activations, atol=1e-6)

    @backend_marks.RUN_ONCE
    def test_compile_default_without_total_steps(self):
        model = MatrixCapsNet(**_TINY)
        model.compile()
        self.assertIsInstance(model.optimizer, keras.optimizers.Adam)
        # TensorFlow 1's Adam epsilon, as in the official code.
        self.assertEqual(model.optimizer.epsilon, 1e-8)
        schedule = _schedule(model.optimizer)
        self.assertIsInstance(
            schedule, keras.optimizers.schedules.ExponentialDecay
        )
        config = schedule.get_config()
        self.assertEqual(
            {k: config[k] for k in ("decay_steps", "decay_rate", "staircase")},
            {"decay_steps": 20000, "decay_rate": 0.96, "staircase": False},
        )
        for step in (0, 1, 50, 20000):
            self.assertAllClose(
                schedule(step), 0.02 * 0.96 ** (step / 20000), rtol=1e-6
            )
        self.assertIsInstance(model.loss, SpreadLoss)
        self.assertIs(model.loss.margin, model.spread_margin)
        self.assertTrue(
            any(v is model.spread_margin for v in model.non_trainable_variables)
        )
        # No run length is needed: `train_on_batch` works straight away.
        x, y = _data(4)
        logs = model.train_on_batch(x, y, return_dict=True)
        self.assertTrue(np.isfinite(logs["loss"]))
        self.assertEqual(int(model.optimizer.iterations), 1)
        self.assertAllClose(
            model.optimizer.learning_rate,
            0.02 * 0.96 ** (1 / 20000),
            rtol=1e-6,
        )

    @backend_marks.RUN_ONCE
    def test_compile_with_total_steps_is_a_cosine_over_the_run(self):
        model = MatrixCapsNet(**_TINY)
        model.compile(total_steps=100)
        self.assertEqual(model.optimizer.epsilon, 1e-8)
        schedule = _schedule(model.optimizer)
        self.assertIsInstance(schedule, keras.optimizers.schedules.CosineDecay)
        self.assertEqual(schedule.get_config()["decay_steps"], 100)
        self.assertEqual(schedule.get_config()["alpha"], 0.0)
        for step, expected in (
            (0, 0.04),
            (1, 0.02 * (1 + np.cos(np.pi / 100))),
            (50, 0.02),
            (100, 0.0),
        ):
            self.assertAllClose(schedule(step), expected, atol=1e-7, rtol=1e-5)
        x, y = _data(4)
        model.train_on_batch(x, y)
        self.assertAllClose(
            model.optimizer.learning_rate,
            0.02 * (1 + np.cos(np.pi / 100)),
            rtol=1e-5,
        )
        # A later fit keeps the length given.
        model.fit(x, y, batch_size=2, epochs=1, verbose=0)
        self.assertEqual(
            _schedule(model.optimizer).get_config()["decay_steps"], 100
        )

    @pytest.mark.primary_backend
    def test_default_optimizer(self):
        model = MatrixCapsNet(**_TINY)
        for total_steps, schedule_class in (
            (None, keras.optimizers.schedules.ExponentialDecay),
            (10, keras.optimizers.schedules.CosineDecay),
        ):
            optimizer = model.default_optimizer(total_steps)
            self.assertIsInstance(optimizer, keras.optimizers.Adam)
            self.assertIsInstance(_schedule(optimizer), schedule_class)
        with self.assertRaisesRegex(ValueError, r"Received: total_steps=0$"):
            model.default_optimizer(total_steps=0)

    @backend_marks.RUN_ONCE
    def test_official_schedule_is_an_optimizer_passed_in(self):
        model = MatrixCapsNet(**_TINY)
        official = keras.optimizers.Adam(
            keras.optimizers.schedules.ExponentialDecay(
                0.01, decay_steps=20000, decay_rate=0.96
            ),
            epsilon=1e-8,
        )
        model.compile(optimizer=official)
        self.assertIs(model.optimizer, official)
        x, y = _data(4)
        model.train_on_batch(x, y)
        self.assertAllClose(
            model.optimizer.learning_rate, 0.01 * 0.96 ** (1 / 20000)
        )
        with self.assertRaisesRegex(
            TypeError, r"unexpected keyword argument 'schedule'"
        ):
            model.compile(schedule="official")

    @backend_marks.RUN_ONCE
    def test_saved_after_compile_keeps_the_schedule(self):
        model = MatrixCapsNet(**_TINY)
        model.compile(total_steps=40)
        x, y = _data(4)
        model.fit(x, y, batch_size=2, epochs=1, verbose=0)
        path = os.path.join(self.get_temp_dir(), "model.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
        self.assertIsInstance(loaded, MatrixCapsNet)
        self.assertEqual(
            loaded.optimizer.get_config()["learning_rate"],
            model.optimizer.get_config()["learning_rate"],
        )
        self.assertEqual(int(loaded.optimizer.iterations), 2)
        self.assertAllClose(
            loaded.optimizer.learning_rate, model.optimizer.learning_rate
        )
        # It trains on with the same schedule.
        loaded.train_on_batch(x, y)
        self.assertAllClose(
            loaded.optimizer.learning_rate,
            0.02 * (1 + np.cos(np.pi * 3 / 40)),
            rtol=1e-5,
        )

    @pytest.mark.primary_backend
    def test_compile_wires_a_given_spread_loss(self):
        model = MatrixCapsNet(**_TINY)
        loss = SpreadLoss(margin=0.5)
        model.compile(loss=loss)
        self.assertIs(loss.margin, model.spread_margin)
        self.assertAllClose(model.spread_margin, 0.5)

    def test_weight_decay_is_the_official_l2_loss(self):
        model = MatrixCapsNet(weight_decay=2e-7, **_TINY)
        kernels = [w for w in model.trainable_weights if "kernel" in w.path]
        self.assertLen(kernels, 6)
        # weight_decay * l2_loss(w), with l2_loss(w) = sum(w^2) / 2.
        expected = sum(
            2e-7 * np.sum(np.square(keras.ops.convert_to_numpy(w))) / 2
            for w in kernels
        )
        total = sum(
            float(keras.ops.convert_to_numpy(loss)) for loss in model.losses
        )
        self.assertAllClose(total, expected, rtol=1e-5)
        self.assertEmpty(MatrixCapsNet(weight_decay=0, **_TINY).losses)

    def test_fit_reads_the_margin_and_saves(self):
        model = MatrixCapsNet(**_TINY)
        model.compile()
        x, y = _data()
        activations = model.predict(x, verbose=0).astype("float64")
        weight_decay = sum(
            float(keras.ops.convert_to_numpy(loss)) for loss in model.losses
        )
        scheduler = SpreadMarginScheduler(
            initial_margin=0.5, ramp_epochs=1, update_freq="epoch"
        )
        # One step per epoch: the first loss is computed with the initial
        # weights, so it is a known function of the margin the compiled
        # step read (0.5 from the scheduler, not the variable's 0.2).
        history = model.fit(
            x,
            y,
            batch_size=len(x),
            epochs=2,
            callbacks=[scheduler],
            verbose=0,
        )
        self.assertAllClose(
            history.history["loss"][0],
            references.spread_loss(y, activations, 0.5).mean() + weight_decay,
            atol=1e-5,
        )
        self.assertTrue(np.all(np.isfinite(history.history["loss"])))
        self.assertAllClose(
            np.array(history.history["spread_margin"]),
            np.array([0.5, 0.9]),
        )
        self.assertIn("accuracy", history.history)

        loaded = self.run_model_saving_test(model, x, layer_cls=EMClassCaps)
        self.assertAllClose(loaded.spread_margin, 0.9)
        self.assertIsInstance(loaded.loss, SpreadLoss)
        self.assertIs(loaded.loss.margin, loaded.spread_margin)
        self.assertIsInstance(loaded.optimizer, keras.optimizers.Adam)
        self.assertEqual(
            int(keras.ops.convert_to_numpy(loaded.optimizer.iterations)), 2
        )

    @pytest.mark.primary_backend
    def test_interrupted_fit_resumes_margin_and_step(self):
        # What `--backup-dir` of the examples does: a run stopped after two
        # of four epochs and started again in a fresh model continues with
        # the optimizer step, the learning-rate schedule and the spread
        # margin of an uninterrupted run.
        x, y = _data(batch=8)
        backup = os.path.join(self.get_temp_dir(), "backup")

        class Interrupt(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                if epoch == 2:
                    raise RuntimeError("interrupted")

        def run(extra_callbacks):
            keras.utils.set_random_seed(0)
            model = MatrixCapsNet(**_TINY)
            model.compile()
            callbacks = [
                SpreadMarginScheduler(ramp_epochs=4, update_freq="epoch"),
                keras.callbacks.BackupAndRestore(backup),
            ] + extra_callbacks
            try:
                model.fit(
                    x,
                    y,
                    epochs=4,
                    batch_size=4,
                    callbacks=callbacks,
                    verbose=0,
                )
            except RuntimeError:
                pass
            return model

        class Epochs(keras.callbacks.Callback):
            seen = []

            def on_epoch_begin(self, epoch, logs=None):
                self.seen.append(epoch)

        interrupted = run([Interrupt()])
        self.assertEqual(int(interrupted.optimizer.iterations), 4)
        resumed = run([Epochs()])
        self.assertEqual(Epochs.seen, [2, 3])
        self.assertEqual(int(resumed.optimizer.iterations), 8)
        # The linear ramp over 4 epochs sets epoch 3's margin at its start.
        self.assertAllClose(resumed.spread_margin, 0.2 + 0.7 * 3 / 4, atol=1e-6)

    @pytest.mark.primary_backend
    def test_config_round_trip(self):
        kwargs = dict(_TINY, coordinate_addition=False, weight_decay=1e-6)
        model = MatrixCapsNet(name="matrix", **kwargs)
        config = model.get_config()
        for key, value in kwargs.items():
            self.assertEqual(config[key], value)
        revived = MatrixCapsNet.from_config(config)
        self.assertIsInstance(revived, MatrixCapsNet)
        self.assertEqual(revived.get_config(), config)
        self.assertFalse(revived.class_caps.coordinate_addition)
        deserialized = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(model)
        )
        self.assertIsInstance(deserialized, MatrixCapsNet)

    @pytest.mark.primary_backend
    def test_routing_setting(self):
        sizes = {k: v for k, v in _TINY.items() if k != "routing_iterations"}
        default = MatrixCapsNet(**sizes)
        self.assertEqual(default.routing_iterations, 2)
        self.assertEqual(default.get_config()["routing"], "default")
        self.assertEqual(default.get_config()["routing_iterations"], 2)
        official = MatrixCapsNet(routing="official", **sizes)
        conv = {
            "routing_iterations": 3,
            "final_lambda": 0.01,
            "min_variance": 5e-4,
            "epsilon": 1e-7,
            "routing_mode": "official",
            "routing_normalization": "reference",
        }
        dense = {
            "routing_iterations": 3,
            "final_lambda": 0.0025,
            "min_variance": 5e-4,
            "epsilon": 1e-5,
            "routing_mode": "official",
        }
        for layer, expected in (
            (official.conv_caps1, conv),
            (official.conv_caps2, conv),
            (official.class_caps, dense),
            (default.conv_caps1, {"routing_normalization": "official"}),
            (default.class_caps, {"epsilon": None, "final_lambda": 1e-3}),
        ):
            config = layer.get_config()
            self.assertEqual({k: config[k] for k in expected}, expected)
        config = official.get_config()
        self.assertEqual(
            (config["routing"], config["routing_iterations"]), ("official", 3)
        )
        self.assertEqual(MatrixCapsNet.from_config(config).get_config(), config)
        x, _ = _data(2)
        self.run_model_saving_test(official, x)
        # The iterations given override the setting's, in every layer.
        fewer = MatrixCapsNet(routing="official", **_TINY)
        for layer in (fewer.conv_caps1, fewer.conv_caps2, fewer.class_caps):
            self.assertEqual(layer.routing_iterations, 1)
        self.assertEqual(fewer.class_caps.epsilon, 1e-5)

    @parameterized.named_parameters(
        ("float16", "mixed_float16"), ("bfloat16", "mixed_bfloat16")
    )
    @pytest.mark.backends("tensorflow", "torch")
    def test_mixed_precision_predict_is_finite(self, policy):
        keras.config.set_dtype_policy(policy)
        self.addCleanup(keras.config.set_dtype_policy, "float32")
        model = MatrixCapsNet(**_TINY)
        x, _ = _data(2)
        activations = model.predict(x * 1e4, verbose=0)
        self.assertAllFinite(activations)
        self.assertEqual(
            keras.backend.standardize_dtype(model.spread_margin.dtype),
            "float32",
        )

    @parameterized.named_parameters(
        (
            "small_images",
            {"image_shape": (16, 16, 1)},
            ValueError,
            r"at least 17.*Received: image_shape=\(16, 16, 1\)$",
        ),
        (
            "input_rank",
            {"image_shape": (32, 32)},
            ValueError,
            r"image_shape must be a tuple of 3 .*"
            r"Received: image_shape=\(32, 32\)$",
        ),
        ("channels", {"A": 0}, ValueError, "Received: A=0"),
        (
            "classes",
            {"num_classes": 1.5},
            ValueError,
            "Received: num_classes=1.5",
        ),
        (
            "iterations",
            {"routing_iterations": 0},
            ValueError,
            "Received: routing_iterations=0",
        ),
        ("routing", {"routing": "fast"}, ValueError, "Received: routing=fast"),
        (
            "coordinates",
            {"coordinate_addition": "yes"},
            TypeError,
            "Received: coordinate_addition=yes",
        ),
        (
            "weight_decay",
            {"weight_decay": -1.0},
            ValueError,
            "Received: weight_decay=-1.0",
        ),
        (
            "weight_decay_type",
            {"weight_decay": "1e-4"},
            TypeError,
            "Received: weight_decay='1e-4'",
        ),
    )
    @pytest.mark.primary_backend
    def test_rejects_bad_arguments(self, kwargs, error, pattern):
        with self.assertRaisesRegex(error, pattern):
            MatrixCapsNet(**kwargs)

    @pytest.mark.primary_backend
    def test_smallest_images(self):
        model = MatrixCapsNet(**dict(_TINY, image_shape=(17, 17, 2)))
        self.assertEqual(
            tuple(model.conv_caps2.output[1].shape), (None, 1, 1, 4)
        )

    @pytest.mark.large
    def test_fit_with_xla(self):
        model = MatrixCapsNet(**_TINY)
        model.compile()
        x, y = _data()
        history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        self.assertTrue(np.isfinite(history.history["loss"][0]))
        path = os.path.join(self.get_temp_dir(), "model.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
        self.assertAllClose(
            loaded.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-5
        )
