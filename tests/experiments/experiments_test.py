"""The research harnesses in `experiments/`: their parts, a resumed run's
data, and each harness run with `--smoke`."""

import glob
import importlib.util
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from absl.testing import parameterized

import keras_capsules
from keras_capsules.datasets import mnist
from keras_capsules.testing import TestCase
from tests import resume

# The harnesses' flags, data and smoke runs: the models they train are
# tested on every backend by the model tests.
pytestmark = pytest.mark.primary_backend

_EXPERIMENTS_DIR = os.path.join(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ),
    "experiments",
)
# `_`-prefixed modules hold code the harnesses share; they are not scripts.
_SCRIPTS = sorted(
    path
    for path in glob.glob(os.path.join(_EXPERIMENTS_DIR, "*.py"))
    if not os.path.basename(path).startswith("_")
)


def load_experiment(name):
    """Imports `experiments/<name>.py`, which imports its `_` siblings."""
    sys.path.insert(0, _EXPERIMENTS_DIR)
    try:
        spec = importlib.util.spec_from_file_location(
            name, os.path.join(_EXPERIMENTS_DIR, f"{name}.py")
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(_EXPERIMENTS_DIR)
    return module


class MultiMNISTResumeTest(TestCase):
    def pairs_seen(self, argv, backup_dir, interrupt_at=None):
        """The training batches a run of `multi_mnist` feeds its model."""
        multi_mnist = load_experiment("multi_mnist")
        args = multi_mnist.parse_args(
            ["--smoke", "--seed", "3", "--backup-dir", backup_dir, *argv]
        )
        args.epochs = 4
        images, labels = mnist.load_sample("train")
        images = np.rint(images[:300, ..., 0] * 255).astype("uint8")
        data = multi_mnist.labels_only(
            multi_mnist.training_pairs(images, labels[:300].argmax(-1), args)
        )
        return resume.batches_seen(
            data,
            args.epochs,
            backup_dir,
            interrupt_at,
            [keras_capsules.callbacks.DatasetEpoch(data)],
            activation="sigmoid",
            loss="binary_crossentropy",
        )

    @parameterized.named_parameters(
        ("new_pairs_every_epoch", ()), ("fixed_pairs", ("--fixed-pairs",))
    )
    def test_resumed_run_sees_the_pairs_of_an_uninterrupted_run(self, argv):
        temp = self.get_temp_dir()
        whole = self.pairs_seen(argv, os.path.join(temp, "whole"))
        backup = os.path.join(temp, "cut")
        cut = self.pairs_seen(argv, backup, interrupt_at=2)
        resumed = self.pairs_seen(argv, backup)
        # Two batches an epoch; the interrupted run trained on epochs 0
        # and 1 and the first batch of epoch 2, then resumed at epoch 2.
        self.assertLen(whole, 8)
        self.assertLen(cut, 5)
        self.assertLen(resumed, 4)
        for got, expected in zip(cut[:4] + resumed, whole):
            np.testing.assert_array_equal(got, expected)
        # The data changes from epoch to epoch.
        self.assertFalse(np.array_equal(whole[0], whole[2]))


def _roll(batch, seed):
    """A transform of `transformed_digits` that depends on its seed."""
    return np.roll(batch, seed % 3, axis=1)


@pytest.mark.large
class ScaeVariantsResumeTest(TestCase):
    def test_resumed_run_continues_the_uninterrupted_one(self):
        scae_variants = load_experiment("scae_variants")
        folder = self.get_temp_dir()

        def losses(jsonl, argv):
            scae_variants.main(["--smoke", "--jsonl", jsonl, *argv])
            with open(jsonl) as file:
                records = [json.loads(line) for line in file]
            return [p["loss"] for r in records for p in r["losses"]]

        whole = losses(f"{folder}/whole.jsonl", ["--steps", "4"])
        saved = f"{folder}/half.keras"
        first = losses(
            f"{folder}/half.jsonl", ["--steps", "2", "--save", saved]
        )
        resumed = losses(
            f"{folder}/half.jsonl", ["--steps", "4", "--resume", saved]
        )
        self.assertLen(whole, 4)
        self.assertEqual(resumed[:2], first)
        self.assertAllClose(resumed, whole, rtol=1e-4)

    def test_decay_from_holds_the_rate_then_follows_a_cosine(self):
        scae_variants = load_experiment("scae_variants")
        folder = self.get_temp_dir()
        flags = ["--smoke", "--jsonl", f"{folder}/runs.jsonl"]
        flags += ["--optimizer", "rmsprop", "--learning-rate", "1e-3"]
        flags += ["--warmup-steps", "2", "--floor", "0.1"]

        def rates(path):
            optimizer = keras.saving.load_model(path).optimizer
            self.assertEqual(int(optimizer.iterations), 6)
            schedule = keras.optimizers.schedules.deserialize(
                optimizer.get_config()["learning_rate"]
            )
            return [float(schedule(step)) for step in range(8)]

        # A run resumed with --decay-from at the end of a constant-rate run,
        # and the same run from the start.
        scae_variants.main(
            [*flags, "--steps", "3", "--floor", "1"]
            + ["--save", f"{folder}/a.keras"]
        )
        scae_variants.main(
            [*flags, "--steps", "6", "--decay-from", "4"]
            + ["--resume", f"{folder}/a.keras", "--save", f"{folder}/b.keras"]
        )
        scae_variants.main(
            [*flags, "--steps", "6", "--decay-from", "4"]
            + ["--save", f"{folder}/c.keras"]
        )
        # Up over the warm-up, held to step 4, half-way down the cosine at
        # 5, the floor from 6 on.
        expected = [0, 5e-4, 1e-3, 1e-3, 1e-3, 5.5e-4, 1e-4, 1e-4]
        self.assertAllClose(rates(f"{folder}/b.keras"), expected)
        self.assertAllClose(rates(f"{folder}/c.keras"), expected)
        for wrong in ("1", "6"):
            with self.assertRaisesRegex(SystemExit, "2"):
                scae_variants.main([*flags, "--decay-from", wrong])

    def test_preset_holds_the_scores_and_the_command(self):
        scae_variants = load_experiment("scae_variants")
        folder = self.get_temp_dir()
        jsonl, preset = f"{folder}/runs.jsonl", f"{folder}/preset"
        flags = ["--smoke", "--jsonl", jsonl, "--name", "fast"]
        flags += ["--presence-masking", "log", "--steps", "2"]
        scae_variants.main([*flags, "--test", "--preset", preset])
        with open(jsonl) as file:
            test = [json.loads(line) for line in file][-1]["test"]
        model = keras_capsules.models.from_preset(preset)
        self.assertEqual(model.presence_masking, "log")
        with open(f"{preset}/metadata.json") as file:
            metadata = json.load(file)
        self.assertEqual(metadata["test_accuracy"], test["posterior_kmeans"])
        self.assertEqual(metadata["steps"], 2)
        self.assertEqual(metadata["images_seen"], 16)
        self.assertEqual(
            metadata["images"], {"train": 16, "val": 20, "test": 20}
        )
        self.assertRegex(
            metadata["command"],
            r"^KERAS_BACKEND=\w+ python experiments/scae_variants.py "
            r"--data-dir path/to/mnist --name fast .*--presence-masking log "
            rf".*--steps 2 .*--test --preset {preset}$",
        )
        with self.assertRaisesRegex(SystemExit, "2"):
            scae_variants.main([*flags, "--preset", preset])


class SeededBatchesTest(TestCase):
    def test_batches_depend_only_on_seed_epoch_and_index(self):
        common = load_experiment("_common")
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, (10, 4, 4), dtype="uint8")
        labels = np.arange(10) % 10

        def epochs(seed):
            data = common.transformed_digits(images, labels, 4, seed, _roll)
            first = [data[i] for i in range(len(data))]
            data.epoch = 1
            return first, [data[i] for i in range(len(data))]

        (epoch0, epoch1), (again0, _) = epochs(0), epochs(0)
        self.assertLen(epoch0, 3)
        for (x, y), (x2, y2) in zip(epoch0, again0):
            self.assertAllClose(x, x2)
            self.assertAllClose(y, y2)
        self.assertEqual(epoch0[0][0].shape, (4, 4, 4, 1))
        self.assertEqual(epoch0[2][1].shape, (2, 10))
        # Every digit once per epoch, with its label, in a new order.
        seen = np.concatenate([y.argmax(-1) for _, y in epoch0])
        self.assertEqual(sorted(seen.tolist()), labels.tolist())
        self.assertNotEqual(
            seen.tolist(),
            np.concatenate([y.argmax(-1) for _, y in epoch1]).tolist(),
        )

    def test_processes_share_every_batch(self):
        common = load_experiment("_common")
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, (12, 4, 4), dtype="uint8")
        labels = np.arange(12) % 10

        whole = common.transformed_digits(images, labels, 4, 7, _roll)
        shares = []
        for process_id in (0, 1):
            share = common.transformed_digits(images, labels, 4, 7, _roll)
            share.num_processes, share.process_id = 2, process_id
            shares.append(share)
        for epoch in (0, 1):
            for data in [whole, *shares]:
                data.epoch = epoch
            for index in range(len(whole)):
                for part, expected in zip(
                    zip(*(share[index] for share in shares)), whole[index]
                ):
                    np.testing.assert_array_equal(
                        np.concatenate(part), expected
                    )
        odd = common.SeededBatches(
            1, lambda epoch, index: (np.zeros((3, 1)),), num_processes=2
        )
        with self.assertRaisesRegex(ValueError, "3 examples.*2 processes"):
            odd[0]


class ViewpointAnglesTest(TestCase):
    def test_familiar_and_novel_ranges(self):
        viewpoints = load_experiment("viewpoints_mnist")
        familiar = viewpoints.familiar_angles(1000, seed=0, familiar=30)
        self.assertLessEqual(np.abs(familiar).max(), 30)
        novel = viewpoints.novel_angles(1000, seed=0, familiar=30, novel=90)
        self.assertGreaterEqual(np.abs(novel).min(), 30)
        self.assertLessEqual(np.abs(novel).max(), 90)
        # Both ways, about equally often.
        self.assertAllClose(np.mean(novel > 0), 0.5, atol=0.05)

    def test_accuracy_by_band_counts_every_digit_once(self):
        viewpoints = load_experiment("viewpoints_mnist")
        args = viewpoints.parse_args([])
        angles = np.array([30.0, -45.0, 50.0, -60.0, 89.0, 90.0])
        right = np.array([True, False, True, True, False, True])
        bands = viewpoints.accuracy_by_band(right, angles, args)
        self.assertEqual(
            bands,
            [
                [30.0, 45.0, 1.0, 1],
                [45.0, 60.0, 0.5, 2],
                [60.0, 75.0, 1.0, 1],
                [75.0, 90.0, 0.5, 2],
            ],
        )

    def test_familiar_range_must_be_below_novel(self):
        parse_args = load_experiment("viewpoints_mnist").parse_args
        with self.assertRaisesRegex(ValueError, "novel_angle=20"):
            parse_args(["--familiar-angle", "30", "--novel-angle", "20"])


class AdversarialAttackTest(TestCase):
    def setUp(self):
        super().setUp()
        self.adversarial = load_experiment("adversarial")
        rng = np.random.default_rng(0)
        self.x = rng.uniform(size=(4, 6, 6, 1)).astype("float32")
        self.y = np.eye(10, dtype="float32")[:4]
        self.direction = rng.normal(size=self.x.shape).astype("float32")

    def gradient(self, x, y):
        # The gradient of a linear loss: the same direction everywhere.
        return self.direction

    def test_fgsm_steps_epsilon_along_the_gradient_sign(self):
        out = self.adversarial.attack(self.gradient, self.x, self.y, 0.1, 1)
        expected = np.clip(self.x + 0.1 * np.sign(self.direction), 0, 1)
        self.assertAllClose(out, expected)

    def test_bim_stays_in_the_epsilon_box_and_the_pixel_range(self):
        out = self.adversarial.attack(self.gradient, self.x, self.y, 0.2, 10)
        self.assertLessEqual(np.abs(out - self.x).max(), 0.2 + 1e-6)
        self.assertGreaterEqual(out.min(), 0.0)
        self.assertLessEqual(out.max(), 1.0)
        # A linear loss is maximised at the corner of the box.
        expected = np.clip(self.x + 0.2 * np.sign(self.direction), 0, 1)
        self.assertAllClose(out, expected, atol=1e-6)

    def test_zero_epsilon_leaves_the_digits(self):
        out = self.adversarial.attack(self.gradient, self.x, self.y, 0.0, 10)
        self.assertAllClose(out, self.x)

    def test_gradient_moves_confidently_right_digits(self):
        # A saturated softmax (a logit gap of about 50): the
        # cross-entropy's gradient would be zero.
        model = keras.Sequential(
            [
                keras.Input((6, 6, 1)),
                keras.layers.Flatten(),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )
        kernel = np.zeros((36, 10), "float32")
        kernel[:, 0] = 3.0
        kernel[0, 1] = 1.0
        model.layers[-1].set_weights([kernel, np.zeros(10, "float32")])
        y = np.eye(10, dtype="float32")[[0, 0, 0, 0]]
        self.assertAllClose(model.predict(self.x, verbose=0), y)
        gradient = self.adversarial.input_gradient(model)(self.x, y)
        self.assertTrue(np.all(np.isfinite(gradient)))
        # d(z_1 - z_0)/dx: 1 - 3 at the first pixel, -3 elsewhere.
        expected = np.full(self.x.shape, -3.0, "float32")
        expected[:, 0, 0, 0] = -2.0
        self.assertAllClose(gradient, expected, rtol=1e-4)

    def test_rejects_bad_arguments(self):
        parse_args = self.adversarial.parse_args
        with self.assertRaisesRegex(ValueError, "model='capsnet.keras'"):
            parse_args(["--model", "capsnet.keras"])
        with self.assertRaisesRegex(ValueError, "epsilons=.1.5"):
            parse_args(["--model", "a=b", "--epsilons", "1.5"])


class FlagVocabularyTest(TestCase):
    @parameterized.named_parameters(
        [(os.path.basename(s)[:-3], s) for s in _SCRIPTS]
    )
    def test_common_flags_are_spelled_alike(self, script):
        with open(script) as file:
            source = file.read()
        for old in ("--manual-dir", "--config", '"--output"', '"--data"'):
            self.assertNotIn(old, source)


@pytest.mark.large
class ExperimentSmokeTest(TestCase):
    def test_experiments_are_found(self):
        self.assertEqual(
            [os.path.basename(s) for s in _SCRIPTS],
            [
                "adversarial.py",
                "affine_mnist.py",
                "continue_preset.py",
                "data_parallel.py",
                "multi_mnist.py",
                "multi_process.py",
                "preset_figures.py",
                "quickstart_schedules.py",
                "raw_pixels.py",
                "scae_variants.py",
                "viewpoints_mnist.py",
            ],
        )

    @parameterized.named_parameters(
        [(os.path.basename(s)[:-3], s) for s in _SCRIPTS]
    )
    def test_smoke(self, script):
        result = subprocess.run(
            [sys.executable, script, "--smoke"],
            cwd=self.get_temp_dir(),
            env=dict(os.environ, MPLBACKEND="Agg"),
            capture_output=True,
            text=True,
            timeout=1200,
        )
        name = os.path.basename(script)
        if (
            name == "data_parallel.py" and keras.backend.backend() == "torch"
        ) or (name == "multi_process.py" and keras.backend.backend() != "jax"):
            # No engine for it on this backend: the script must refuse.
            self.assertNotEqual(result.returncode, 0)
            self.assertIn("not supported", result.stderr)
            return
        self.assertEqual(
            result.returncode,
            0,
            f"{os.path.basename(script)} --smoke failed:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}",
        )
