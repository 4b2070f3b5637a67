"""The batches and test canvases that both sides of a side-by-side SCAE
run read (`experiments/official_scae/side_by_side.py`), on made-up MNIST
files: the same batch for the same seed and step wherever a run resumes,
every digit whole on its canvas."""

import gzip
import importlib.util
import json
import os
import tempfile

import numpy as np
import pytest

from keras_capsules.testing import TestCase

# The side-by-side run's data, in NumPy.
pytestmark = pytest.mark.primary_backend

_PATH = os.path.join(
    os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ),
    "experiments",
    "official_scae",
    "side_by_side.py",
)


def _module():
    spec = importlib.util.spec_from_file_location("side_by_side", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_mnist(folder, split, count, rng):
    images = rng.integers(1, 256, (count, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, count, dtype=np.uint8)
    with gzip.open(
        os.path.join(folder, f"{split}-images-idx3-ubyte.gz"), "wb"
    ) as f:
        f.write(b"\0" * 16 + images.tobytes())
    with gzip.open(
        os.path.join(folder, f"{split}-labels-idx1-ubyte.gz"), "wb"
    ) as f:
        f.write(b"\0" * 8 + labels.tobytes())
    return images, labels


class SideBySideDataTest(TestCase):
    def test_batches_and_canvases(self):
        side_by_side = _module()
        rng = np.random.default_rng(0)
        with tempfile.TemporaryDirectory() as folder:
            written, written_labels = _write_mnist(folder, "train", 60, rng)
            images, labels = side_by_side.read_mnist(folder, "train")
        np.testing.assert_array_equal(images, written)
        np.testing.assert_array_equal(labels, written_labels)
        side_by_side.TRAIN_DIGITS = 50  # The made-up split is small.
        x, y = side_by_side.batch(images, labels, seed=3, step=7, size=16)
        again_x, again_y = side_by_side.batch(images, labels, 3, 7, size=16)
        np.testing.assert_array_equal(x, again_x)
        np.testing.assert_array_equal(y, again_y)
        other_x, _ = side_by_side.batch(images, labels, 3, 8, size=16)
        self.assertFalse(np.array_equal(x, other_x))
        self.assertEqual(x.shape, (16, 40, 40, 1))
        self.assertEqual(x.dtype, np.float32)
        # Every digit whole on its canvas: its pixels sum to the digit's.
        sums = x.reshape(16, -1).sum(axis=1)
        digit_sums = images.reshape(60, -1).sum(axis=1) / 255.0
        for total, label in zip(sums, y):
            matches = np.isclose(digit_sums, total, rtol=1e-5)
            self.assertTrue(matches.any())
            self.assertIn(label, labels[matches])
        test_x, test_y = side_by_side.test_canvases(images, labels, 10)
        np.testing.assert_array_equal(test_y, labels[:10])
        np.testing.assert_allclose(
            test_x.reshape(10, -1).sum(axis=1), digit_sums[:10], rtol=1e-5
        )


class SideBySideCompareTest(TestCase):
    def test_scores_of_both_sides(self):
        spec = importlib.util.spec_from_file_location(
            "side_by_side_compare",
            os.path.join(os.path.dirname(_PATH), "side_by_side_compare.py"),
        )
        compare = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(compare)
        labels = np.repeat(np.arange(10), 4)
        # Presences that separate the classes: k-means finds them all.
        presence = np.eye(10, dtype="float32")[labels] * 5.0
        noise = np.random.default_rng(0).uniform(size=presence.shape)
        test = {"prior_probe": 0.5, "posterior_probe": 0.25}
        records = [
            {"side": "official", "seed": 0, "step": 50, "mean_loss": 9.0},
            {"side": "official", "seed": 0, "step": 50, "mean_loss": 7.0},
            {"side": "official", "seed": 0, "step": 100, "test": test},
            {"side": "ours", "seed": 0, "step": 50, "mean_loss": 7.7},
            {
                "side": "ours",
                "seed": 0,
                "step": 100,
                "test": {**test, "prior_kmeans": 0.3, "posterior_kmeans": 0.4},
            },
        ]
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "curves.jsonl"), "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in records)
            np.savez(
                os.path.join(folder, "eval_official_seed0_100.npz"),
                prior_presence=presence,
                posterior_presence=noise,
                labels=labels,
            )
            runs = compare.load(folder)
            gaps = compare.gap_table(runs, 500)
            compare.main(["--out", folder, "--scores", f"{folder}/s.json"])
            with open(os.path.join(folder, "s.json")) as f:
                scores = json.load(f)
        # A resumed run's later record of a step is kept.
        self.assertEqual(runs[("official", 0)]["log"][0]["mean_loss"], 7.0)
        self.assertEqual(scores["official seed 0"]["100"]["prior_kmeans"], 1.0)
        # Presences that tell nothing apart.
        self.assertLess(
            scores["official seed 0"]["100"]["posterior_kmeans"], 0.6
        )
        self.assertEqual(scores["ours seed 0"]["100"]["posterior_kmeans"], 0.4)
        # Ours 10 % above the official loss of the same step (the later
        # record of the official step).
        self.assertIn("| ours - official, seed 0 |", gaps)
        self.assertIn("| 1-500 | +10.00 (+10.0 to +10.0) |", gaps)
