import gzip
import os
import shutil
import struct
import tempfile

import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules.datasets import multi_mnist
from tests import non_finite

# Data pipelines in NumPy and tf.data: no Keras backend involved.
pytestmark = pytest.mark.primary_backend


def _boxes(num_images=200):
    """28x28 images, each a 20x20 box (the extent of an MNIST digit) of
    value `(label + 1) / 10`, so that a digit's class reads from its ink."""
    labels = np.arange(num_images) % 10
    images = np.zeros((num_images, 28, 28), "float32")
    images[:, 4:24, 4:24] = ((labels + 1) / 10.0)[:, None, None]
    return images, labels


def _ink_labels(objects):
    """The class of each object, read from its ink value."""
    peak = objects.reshape(objects.shape[:2] + (-1,)).max(axis=-1)
    return np.rint(peak * 10.0).astype("int64") - 1


def _mean_box_overlap(max_shift, box=20):
    """Expected overlap of two boxes shifted independently by up to
    `max_shift` pixels per axis: E[(box - |d|) / box] ** 2, with d the
    difference of two uniform integers in [-max_shift, max_shift]."""
    shifts = np.arange(-max_shift, max_shift + 1)
    d = np.abs(shifts[:, None] - shifts[None, :])
    return float(np.mean((box - d) / box)) ** 2


def _write_idx(path, array):
    array = np.asarray(array, "uint8")
    header = bytes([0, 0, 0x08, array.ndim])
    header += struct.pack(f">{array.ndim}i", *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.tobytes())


class MakePairsTest(parameterized.TestCase):
    def test_shapes_and_targets(self):
        images, labels = _boxes()
        x, y = multi_mnist.make_pairs(images, labels, num_pairs=50, seed=3)
        self.assertEqual(x.shape, (50, 36, 36, 1))
        self.assertEqual(y["labels"].shape, (50, 10))
        self.assertEqual(y["object_labels"].shape, (50, 2, 10))
        self.assertEqual(y["objects"].shape, (50, 2, 36, 36, 1))
        for array in (x, *y.values()):
            self.assertEqual(array.dtype, np.float32)
        classes = y["object_labels"].argmax(-1)
        # Two digits of different classes, labelled by their own ink.
        self.assertTrue(np.all(classes[:, 0] != classes[:, 1]))
        np.testing.assert_array_equal(_ink_labels(y["objects"]), classes)
        np.testing.assert_array_equal(
            y["labels"], y["object_labels"].sum(axis=1)
        )
        # The input is the clipped sum of the two digits.
        np.testing.assert_allclose(
            x, np.minimum(y["objects"].sum(axis=1), 1.0), atol=1e-7
        )

    def test_deterministic_per_seed(self):
        images, labels = _boxes()
        first = multi_mnist.make_pairs(images, labels, 20, seed=7)
        again = multi_mnist.make_pairs(images, labels, 20, seed=7)
        other = multi_mnist.make_pairs(images, labels, 20, seed=8)
        np.testing.assert_array_equal(first[0], again[0])
        np.testing.assert_array_equal(first[1]["objects"], again[1]["objects"])
        self.assertFalse(np.array_equal(first[0], other[0]))

    def test_mean_overlap_matches_the_analytic_value(self):
        images, labels = _boxes()
        for max_shift in (4, 2):
            _, y = multi_mnist.make_pairs(
                images, labels, 4000, seed=0, max_shift=max_shift
            )
            ink = y["objects"][..., 0] > 0
            overlap = (ink[:, 0] & ink[:, 1]).sum(axis=(1, 2)) / 400.0
            # 0.7257 for shifts of up to 4 pixels.
            self.assertAlmostEqual(
                overlap.mean(), _mean_box_overlap(max_shift), delta=0.006
            )

    def test_shifts_stay_within_max_shift(self):
        images, labels = _boxes()
        _, y = multi_mnist.make_pairs(images, labels, 500, seed=1)
        ink = y["objects"][..., 0] > 0
        rows = ink.any(axis=3).argmax(axis=2)
        cols = ink.any(axis=2).argmax(axis=2)
        # The box starts at 4 + pad = 8 when unshifted.
        for start in (rows, cols):
            self.assertEqual(start.min(), 8 - 4)
            self.assertEqual(start.max(), 8 + 4)
        self.assertEqual(ink.sum(axis=(2, 3)).min(), 400)

    def test_no_shift_centres_the_digits(self):
        images, labels = _boxes(20)
        x, y = multi_mnist.make_pairs(
            images, labels, 10, seed=0, max_shift=0, pad=2, overlay="max"
        )
        self.assertEqual(x.shape, (10, 32, 32, 1))
        np.testing.assert_array_equal(
            x[..., 0], y["objects"][..., 0].max(axis=1)
        )
        ink = y["objects"][..., 0] > 0
        self.assertTrue(np.all(ink[:, :, 6:26, 6:26]))

    def test_accepts_uint8_and_one_hot(self):
        images, labels = _boxes(30)
        x, y = multi_mnist.make_pairs(
            (images * 255).astype("uint8")[..., None],
            np.eye(10)[labels],
            5,
            seed=2,
        )
        reference = multi_mnist.make_pairs(images, labels, 5, seed=2)
        np.testing.assert_allclose(x, reference[0], atol=1 / 255)
        np.testing.assert_array_equal(y["labels"], reference[1]["labels"])

    @parameterized.named_parameters(
        ("shift", dict(max_shift=9), r"at most pad \+ 4 = 8.*max_shift=9"),
        ("pad", dict(pad=-1), r"`pad`.*Received: pad=-1"),
        ("pairs", dict(num_pairs=0), r"Received: num_pairs=0"),
        ("overlay", dict(overlay="mean"), r"Received: overlay=mean"),
        ("one_class", dict(labels=np.zeros(30, int)), r"two classes"),
        ("labels", dict(labels=np.zeros(29, int)), r"labels.shape=\(29,\)"),
        ("images", dict(images=np.zeros((30, 28))), r"images.shape=\(30, 28\)"),
        ("classes", dict(labels=np.arange(30)), r"classes 0 to 9"),
    )
    def test_invalid_arguments(self, kwargs, pattern):
        images, labels = _boxes(30)
        arguments = dict(images=images, labels=labels, num_pairs=4)
        arguments.update(kwargs)
        with self.assertRaisesRegex(ValueError, pattern):
            multi_mnist.make_pairs(**arguments)

    def test_rejects_non_finite_images(self):
        images, labels = _boxes(30)
        for case, bad in non_finite.non_finite_images(images).items():
            with self.subTest(case=case):
                with self.assertRaisesRegex(
                    ValueError,
                    r"^`multi_mnist.make_pairs`: argument `images` must hold "
                    r"finite values.*Received: images"
                    + non_finite.RECEIVED[case],
                ):
                    multi_mnist.make_pairs(bad, labels, 4)

    def test_rejects_values_out_of_range(self):
        images, labels = _boxes(30)
        with self.assertRaisesRegex(
            ValueError,
            r"`images` must hold values in \[0, 1\] \(images of 0\.\.255 "
            r"values: divide them by 255\)\. "
            r"Received: images\.min\(\)=0\.0, images\.max\(\)=255\.0$",
        ):
            multi_mnist.make_pairs(images * 255.0, labels, 4)
        with self.assertRaisesRegex(
            ValueError,
            r"`images` must hold values in \[0, 255\]\. "
            r"Received: images\.min\(\)=-1, images\.max\(\)=1$",
        ):
            multi_mnist.make_pairs(images.astype("int64") * 2 - 1, labels, 4)
        # The ends of both ranges are valid.
        for valid in (images, (images * 255).astype("int64")):
            x, _ = multi_mnist.make_pairs(valid, labels, 4)
            self.assertEqual(x.max(), 1.0)

    def test_seed_must_be_a_non_negative_int(self):
        images, labels = _boxes(30)
        for seed in (0.5, -1):
            with self.assertRaisesRegex(ValueError, f"Received: seed={seed}"):
                multi_mnist.make_pairs(images, labels, 4, seed=seed)


class LoadTest(parameterized.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        pytest.importorskip("tensorflow")

    def setUp(self):
        super().setUp()
        self.manual_dir = self._temp_dir()
        images, labels = _boxes(60)
        for prefix in ("train", "t10k"):
            _write_idx(
                os.path.join(self.manual_dir, f"{prefix}-images-idx3-ubyte.gz"),
                np.rint(images * 250),
            )
            _write_idx(
                os.path.join(self.manual_dir, f"{prefix}-labels-idx1-ubyte.gz"),
                labels,
            )

    def _temp_dir(self):
        path = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, path, ignore_errors=True)
        return path

    def _arrays(self, split, **kwargs):
        dataset = multi_mnist.load(
            split, manual_dir=self.manual_dir, batch_size=8, **kwargs
        )
        batches = [
            (np.asarray(x), {k: np.asarray(v) for k, v in y.items()})
            for x, y in dataset
        ]
        x = np.concatenate([b[0] for b in batches])
        y = {
            k: np.concatenate([b[1][k] for b in batches]) for k in batches[0][1]
        }
        return x, y, [len(b[0]) for b in batches]

    def test_batches_and_targets(self):
        x, y, sizes = self._arrays("train", num_pairs=20, seed=1)
        self.assertEqual(sizes, [8, 8, 4])
        self.assertEqual(x.shape, (20, 36, 36, 1))
        self.assertEqual(y["objects"].shape, (20, 2, 36, 36, 1))
        classes = y["object_labels"].argmax(-1)
        self.assertTrue(np.all(classes[:, 0] != classes[:, 1]))
        np.testing.assert_array_equal(
            np.rint(y["objects"].max(axis=(2, 3, 4)) * 255 / 25) - 1, classes
        )
        np.testing.assert_array_equal(
            y["labels"], y["object_labels"].sum(axis=1)
        )
        np.testing.assert_allclose(
            x, np.minimum(y["objects"].sum(axis=1), 1.0), atol=1e-6
        )
        ink = y["objects"][..., 0] > 0
        self.assertEqual(ink.sum(axis=(2, 3)).min(), 400)

    def test_seeded_streams(self):
        first, _, _ = self._arrays("train", num_pairs=16, seed=4)
        again, _, _ = self._arrays("train", num_pairs=16, seed=4)
        np.testing.assert_array_equal(first, again)
        dataset = multi_mnist.load(
            "train", manual_dir=self.manual_dir, num_pairs=8, seed=4
        )
        epochs = [np.asarray(next(iter(dataset))[0]) for _ in range(2)]
        # New training pairs every epoch, the same test pairs every time.
        self.assertFalse(np.array_equal(*epochs))
        dataset = multi_mnist.load(
            "test", manual_dir=self.manual_dir, num_pairs=8
        )
        epochs = [np.asarray(next(iter(dataset))[0]) for _ in range(2)]
        np.testing.assert_array_equal(*epochs)

    def test_invalid_arguments_fail_before_reading(self):
        with self.assertRaisesRegex(ValueError, r"Received: max_shift=9"):
            multi_mnist.load(max_shift=9, manual_dir="/nonexistent")
        with self.assertRaisesRegex(FileNotFoundError, r"lacks"):
            multi_mnist.load(manual_dir=self._temp_dir())
        with self.assertRaisesRegex(
            TypeError, r"`download` must be a boolean\. Received: download=1$"
        ):
            multi_mnist.load(download=1)

    def test_download_false_without_manual_dir_raises(self):
        pytest.importorskip("tensorflow_datasets")
        with self.assertRaisesRegex(
            FileNotFoundError,
            r"^`mnist.load_arrays`: MNIST is not prepared .*Pass "
            r"`manual_dir`.*Received: manual_dir=None, download=False$",
        ):
            multi_mnist.load(data_dir=self._temp_dir(), download=False)
