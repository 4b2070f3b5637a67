import gzip
import os
import struct
from unittest import mock

import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules import testing
from keras_capsules.datasets import smallnorb
from tests.datasets import helpers

# Data pipelines in NumPy and tf.data: no Keras backend involved.
pytestmark = pytest.mark.primary_backend

_PREFIXES = {
    "train": "smallnorb-5x46789x9x18x6x2x96x96-training",
    "test": "smallnorb-5x01235x9x18x6x2x96x96-testing",
}
# NORB magic numbers, written independently of the reader under test.
_MAGIC = {
    "uint8": 0x1E3D4C55,
    "int32": 0x1E3D4C54,
    "int16": 0x1E3D4C56,
    "float32": 0x1E3D4C51,
    "float64": 0x1E3D4C53,
}
_NUM_EXAMPLES = 10


def _write_norb(path, array, compress=True):
    array = np.asarray(array)
    dims = list(array.shape) + [1] * (3 - array.ndim)
    payload = struct.pack("<ii", _MAGIC[array.dtype.name], array.ndim)
    payload += struct.pack(f"<{len(dims)}i", *dims)
    payload += array.astype(array.dtype.newbyteorder("<")).tobytes()
    opener = gzip.open if compress else open
    with opener(path, "wb") as f:
        f.write(payload)


def _write_split(folder, split, seed, compress=True, num=_NUM_EXAMPLES):
    """Writes tiny dat/cat/info files; returns (images, labels)."""
    rng = np.random.default_rng(seed)
    # Blocky random images plus noise, with a dark and a bright camera so
    # that the per-channel contrast change survives standardisation.
    base = rng.integers(0, 120, (num, 2, 12, 12))
    base[:, 1] += 130
    images = np.repeat(np.repeat(base, 8, axis=2), 8, axis=3)
    images = (images + rng.integers(0, 4, images.shape)).astype(np.uint8)
    labels = (np.arange(num) % 5).astype(np.int32)
    info = np.zeros((num, 4), np.int32)
    suffix = ".mat.gz" if compress else ".mat"
    for kind, array in (("dat", images), ("cat", labels), ("info", info)):
        path = os.path.join(folder, f"{_PREFIXES[split]}-{kind}{suffix}")
        _write_norb(path, array, compress)
    return images, labels


def _concat(dataset):
    batches = helpers.batches(dataset)
    return tuple(np.concatenate(parts) for parts in zip(*batches))


def _reference_image(pair, image_size):
    """The stereo pair as (96, 96, 2) float, resized as bilinear would."""
    image = pair.transpose(1, 2, 0).astype(np.float64)
    factor = 96 // image_size
    # Halving with half-pixel centres averages 2x2 blocks exactly.
    return image.reshape(image_size, factor, image_size, factor, 2).mean(
        axis=(1, 3)
    )


def _standardize(image):
    # per-image standardisation: (x - mean) / max(std, 1 / sqrt(N)).
    std = max(image.std(), 1.0 / np.sqrt(image.size))
    return (image - image.mean()) / std


class ReadNorbTest(testing.TestCase):
    @parameterized.named_parameters(
        ("dat_uint8_gz", (3, 2, 96, 96), "uint8", True),
        ("cat_int32_raw", (7,), "int32", False),
        ("info_int32_gz", (7, 4), "int32", True),
        ("int16_raw", (2, 3, 4), "int16", False),
        ("float32_gz", (2, 3), "float32", True),
        ("float64_raw", (4, 1, 2, 3, 2), "float64", False),
    )
    def test_round_trip(self, shape, dtype, compress):
        rng = np.random.default_rng(0)
        array = (rng.standard_normal(shape) * 100).astype(dtype)
        path = os.path.join(self.get_temp_dir(), "data.mat")
        _write_norb(path, array, compress)
        result = smallnorb.read_norb(path)
        self.assertEqual(result.shape, array.shape)
        self.assertEqual(result.dtype, np.dtype(dtype))
        self.assertTrue(result.dtype.isnative)
        np.testing.assert_array_equal(result, array)

    def test_unknown_magic(self):
        path = os.path.join(self.get_temp_dir(), "bad.mat")
        with open(path, "wb") as f:
            f.write(struct.pack("<5i", 0x12345678, 1, 1, 1, 1) + b"x")
        with self.assertRaisesRegex(ValueError, r"unknown magic.*path="):
            smallnorb.read_norb(path)

    def test_size_mismatch(self):
        path = os.path.join(self.get_temp_dir(), "bad.mat")
        _write_norb(path, np.zeros((3, 4), np.int32), compress=False)
        with open(path, "ab") as f:
            f.write(b"\0")
        with self.assertRaisesRegex(ValueError, r"shape \(3, 4\).*49 bytes"):
            smallnorb.read_norb(path)


class LoadFilesTest(testing.TestCase):
    def setUp(self):
        super().setUp()
        self.folder = self.get_temp_dir()
        self.train = _write_split(self.folder, "train", seed=1)
        self.test = _write_split(self.folder, "test", seed=2)

    def load(self, split, **kwargs):
        kwargs.setdefault("source", "files")
        return smallnorb.load(split, manual_dir=self.folder, **kwargs)

    def test_test_split_matches_numpy_reference(self):
        dataset = self.load("test", batch_size=4)
        images_spec, labels_spec = dataset.element_spec
        self.assertEqual(tuple(images_spec.shape), (None, 32, 32, 2))
        self.assertEqual(tuple(labels_spec.shape), (None, 5))
        images, labels = _concat(dataset)
        self.assertEqual(images.dtype, np.float32)
        self.assertEqual(labels.dtype, np.float32)
        pairs, categories = self.test
        np.testing.assert_array_equal(labels, np.eye(5)[categories])
        expected = np.stack(
            [
                _standardize(_reference_image(pair, 48)[8:40, 8:40])
                for pair in pairs
            ]
        )
        self.assertAllClose(images, expected, atol=1e-4, rtol=1e-4)

    def test_full_resolution(self):
        images, _ = _concat(
            self.load("test", batch_size=10, image_size=96, crop_size=64)
        )
        pairs, _ = self.test
        expected = _standardize(pairs[3].transpose(1, 2, 0)[16:80, 16:80])
        self.assertEqual(images.shape, (10, 64, 64, 2))
        self.assertAllClose(images[3], expected, atol=1e-4, rtol=1e-4)

    def test_multi_crop(self):
        dataset = self.load("test", batch_size=3, multi_crop=True)
        self.assertEqual(
            tuple(dataset.element_spec[0].shape), (None, 13, 32, 32, 2)
        )
        crops, labels = _concat(dataset)
        self.assertEqual(crops.shape, (10, 13, 32, 32, 2))
        central, central_labels = _concat(self.load("test", batch_size=3))
        self.assertAllClose(crops[:, 0], central, atol=1e-5)
        self.assertAllClose(labels, central_labels)
        image = _reference_image(self.test[0][6], 48)
        offsets = [(0, 0)] + [
            (sy * k, sx * k)
            for k in (1, 2, 3)
            for sy, sx in ((1, 1), (1, -1), (-1, 1), (-1, -1))
        ]
        for index, (dy, dx) in enumerate(offsets):
            expected = _standardize(image[8 + dy : 40 + dy, 8 + dx : 40 + dx])
            self.assertAllClose(crops[6, index], expected, atol=1e-4, rtol=1e-4)

    def test_train_split_distorts_and_standardizes(self):
        images, labels = _concat(self.load("train", batch_size=4, seed=0))
        self.assertEqual(images.shape, (10, 32, 32, 2))
        self.assertAllFinite(images)
        self.assertAllClose(images.mean(axis=(1, 2, 3)), 0.0, atol=1e-4)
        self.assertAllClose(images.std(axis=(1, 2, 3)), 1.0, atol=1e-3)
        # Shuffled, yet every example appears once.
        _, categories = self.train
        self.assertEqual(
            sorted(labels.argmax(axis=1)), sorted(categories.tolist())
        )
        # Distorted: no training crop equals an undistorted crop of an
        # image of its class.
        pairs, categories = self.train
        resized = [_reference_image(pair, 48) for pair in pairs]
        for image, label in zip(images, labels.argmax(axis=1)):
            plain = np.stack(
                [
                    _standardize(resized[i][y : y + 32, x : x + 32])
                    for i in np.flatnonzero(categories == label)
                    for y in range(17)
                    for x in range(17)
                ]
            )
            distance = np.abs(plain - image[None]).max(axis=(1, 2, 3))
            self.assertGreater(distance.min(), 1e-3)

    def test_seed_makes_training_reproducible(self):
        first = _concat(self.load("train", batch_size=10, seed=3))
        second = _concat(self.load("train", batch_size=10, seed=3))
        other = _concat(self.load("train", batch_size=10, seed=4))
        self.assertAllClose(first[0], second[0])
        self.assertAllClose(first[1], second[1])
        self.assertFalse(np.allclose(first[0], other[0]))

    def test_shuffle_buffer_zero_keeps_order(self):
        _, labels = _concat(
            self.load("train", batch_size=10, shuffle_buffer=0, seed=0)
        )
        np.testing.assert_array_equal(labels.argmax(axis=1), self.train[1])

    def test_constant_images_stay_finite(self):
        folder = self.get_temp_dir()
        for split in ("train", "test"):
            _write_norb(
                os.path.join(folder, f"{_PREFIXES[split]}-dat.mat.gz"),
                np.full((2, 2, 96, 96), 255, np.uint8),
            )
            _write_norb(
                os.path.join(folder, f"{_PREFIXES[split]}-cat.mat.gz"),
                np.array([0, 4], np.int32),
            )
            images, _ = _concat(
                smallnorb.load(split, manual_dir=folder, source="files")
            )
            self.assertAllFinite(images)

    def test_uncompressed_files(self):
        folder = self.get_temp_dir()
        _, categories = _write_split(folder, "test", seed=5, compress=False)
        _, labels = _concat(
            smallnorb.load("test", manual_dir=folder, source="files")
        )
        np.testing.assert_array_equal(labels.argmax(axis=1), categories)

    def test_auto_falls_back_to_files_without_downloading(self):
        tfds = helpers.tfds_or_skip()
        with helpers.no_downloads(tfds) as attempts:
            dataset = self.load(
                "test", source="auto", data_dir=self.get_temp_dir()
            )
            _, labels = _concat(dataset)
        attempts.assert_not_called()
        np.testing.assert_array_equal(labels.argmax(axis=1), self.test[1])

    def test_tfds_source_rejects_other_files_fast(self):
        helpers.tfds_or_skip()
        data_dir = self.get_temp_dir()
        with self.assertRaisesRegex(
            ValueError,
            r"differ from the originals.*source='files'.*"
            r"Received: manual_dir=",
        ):
            self.load("test", source="tfds", data_dir=data_dir)

    def test_missing_files(self):
        empty = self.get_temp_dir()
        with self.assertRaisesRegex(
            FileNotFoundError,
            r"needs smallnorb-5x01235x9x18x6x2x96x96-testing-dat\.mat\[\.gz\] "
            r"and .*-testing-cat\.mat\[\.gz\]",
        ):
            smallnorb.load("test", manual_dir=empty, source="files")
        with self.assertRaisesRegex(FileNotFoundError, r"the train split"):
            smallnorb.load(
                "train", manual_dir=empty, data_dir=empty, source="auto"
            )

    def test_auto_without_files_raises_without_downloading(self):
        tfds = helpers.tfds_or_skip()
        empty = self.get_temp_dir()
        with helpers.no_downloads(tfds) as attempts:
            with self.assertRaisesRegex(FileNotFoundError, r"the train split"):
                smallnorb.load(
                    "train", manual_dir=empty, data_dir=empty, source="auto"
                )
        attempts.assert_not_called()

    def test_bad_labels(self):
        folder = self.get_temp_dir()
        _write_split(folder, "test", seed=0)
        _write_norb(
            os.path.join(folder, f"{_PREFIXES['test']}-cat.mat.gz"),
            np.full((_NUM_EXAMPLES,), 7, np.int32),
        )
        with self.assertRaisesRegex(ValueError, r"labels must lie in"):
            smallnorb.load("test", manual_dir=folder, source="files")


class LoadTFDSTest(testing.TestCase):
    @parameterized.named_parameters(
        ("train_tfds", "train", "tfds", False, (None, 32, 32, 2)),
        ("test_auto", "test", "auto", False, (None, 32, 32, 2)),
        ("test_multi_crop", "test", "tfds", True, (None, 13, 32, 32, 2)),
    )
    def test_mock_data(self, split, source, multi_crop, shape):
        tfds = helpers.tfds_or_skip()
        with tfds.testing.mock_data(num_examples=5):
            dataset = smallnorb.load(
                split,
                batch_size=2,
                source=source,
                multi_crop=multi_crop,
                seed=0,
            )
        self.assertEqual(tuple(dataset.element_spec[0].shape), shape)
        images, labels = _concat(dataset)
        self.assertEqual(images.shape, (5,) + shape[1:])
        self.assertEqual(labels.shape, (5, 5))
        self.assertAllFinite(images)
        self.assertAllClose(
            images.mean(axis=tuple(range(len(shape) - 3, len(shape)))),
            0.0,
            atol=1e-4,
        )
        np.testing.assert_array_equal(labels.sum(axis=1), 1.0)

    @parameterized.named_parameters(("tfds", "tfds"), ("auto", "auto"))
    def test_downloads_through_tfds_by_default(self, source):
        tfds = helpers.tfds_or_skip()
        data_dir = self.get_temp_dir()
        with tfds.testing.mock_data(num_examples=3):
            with helpers.download_spy(tfds) as (prepare, builder, load):
                dataset = smallnorb.load(
                    "test", batch_size=3, source=source, data_dir=data_dir
                )
        # As `tfds.load("smallnorb", data_dir=data_dir)` would: the builder
        # of the data directory downloads and prepares with TFDS's
        # defaults, then the prepared copy is read.
        builder.assert_called_with("smallnorb", data_dir=data_dir)
        prepare.assert_called_once()
        (prepared,) = prepare.call_args.args
        self.assertEqual(prepared.name, "smallnorb")
        self.assertEqual(prepare.call_args.kwargs, {})
        load.assert_called_once()
        self.assertEqual(load.call_args.args, ("smallnorb",))
        self.assertEqual(load.call_args.kwargs["data_dir"], data_dir)
        self.assertIs(load.call_args.kwargs["download"], False)
        images, labels = _concat(dataset)
        self.assertEqual((images.shape, labels.shape), ((3, 32, 32, 2), (3, 5)))

    def test_download_false_without_manual_dir_raises(self):
        tfds = helpers.tfds_or_skip()
        data_dir = self.get_temp_dir()
        with helpers.no_downloads(tfds) as attempts:
            for source in ("tfds", "auto"):
                with self.subTest(source=source):
                    with self.assertRaisesRegex(
                        FileNotFoundError,
                        r"^`smallnorb.load`: smallnorb is not prepared in .*"
                        r"download=False forbids fetching it\. Pass "
                        r"`manual_dir`: a folder with the six original "
                        r"smallNORB files .*-training-cat\.mat\.gz.*from "
                        r"https://cs\.nyu\.edu/.*"
                        r"Received: manual_dir=None, download=False$",
                    ):
                        smallnorb.load(
                            source=source, data_dir=data_dir, download=False
                        )
        attempts.assert_not_called()

    def test_failed_download_gives_a_clear_error(self):
        tfds = helpers.tfds_or_skip()
        data_dir = self.get_temp_dir()
        failure = ConnectionError("Failed to resolve 'cs.nyu.edu'")
        with mock.patch.object(
            tfds.core.DatasetBuilder,
            "download_and_prepare",
            side_effect=failure,
        ):
            with self.assertRaisesRegex(
                OSError,
                r"^`smallnorb.load`: TensorFlow Datasets could not download "
                r"and prepare smallnorb in .*\(ConnectionError: Failed to "
                r"resolve 'cs\.nyu\.edu'\)\. Without network, pass "
                r"`manual_dir`: a folder with the six original smallNORB "
                r"files .*Received: manual_dir=None$",
            ) as context:
                smallnorb.load(data_dir=data_dir)
        self.assertIs(context.exception.__cause__, failure)

    def test_manual_dir_never_downloads(self):
        tfds = helpers.tfds_or_skip()
        data_dir = self.get_temp_dir()
        with helpers.no_downloads(tfds) as attempts:
            with self.assertRaisesRegex(
                FileNotFoundError,
                r"`manual_dir` lacks .*training-cat\.mat\.gz",
            ):
                smallnorb.load(
                    source="tfds",
                    data_dir=data_dir,
                    manual_dir=self.get_temp_dir(),
                    download=True,
                )
        attempts.assert_not_called()

    def test_missing_tfds(self):
        folder = self.get_temp_dir()
        _, categories = _write_split(folder, "test", seed=0)
        with helpers.without_tfds():
            with self.assertRaisesRegex(
                ImportError, r"pip install keras-capsules\[datasets\]"
            ):
                smallnorb.load("test", source="tfds")
            # "auto" reads the files directly when TFDS is missing.
            _, labels = _concat(smallnorb.load("test", manual_dir=folder))
        np.testing.assert_array_equal(labels.argmax(axis=1), categories)


class ValidationTest(testing.TestCase):
    @parameterized.named_parameters(
        (
            "split",
            dict(split="val"),
            ValueError,
            r'`split` must be "train" or "test"\. Received: split=val$',
        ),
        (
            "batch_size",
            dict(batch_size=-2),
            ValueError,
            r"Received: batch_size=-2$",
        ),
        (
            "shuffle_buffer",
            dict(shuffle_buffer=2.0),
            ValueError,
            r"Received: shuffle_buffer=2.0$",
        ),
        (
            "source",
            dict(source="web"),
            ValueError,
            r"`source` must be one of .*Received: source=web$",
        ),
        (
            "image_size",
            dict(image_size=97),
            ValueError,
            r"at most 96.*Received: image_size=97$",
        ),
        (
            "crop_size",
            dict(crop_size=49),
            ValueError,
            r"at most image_size=48\. Received: crop_size=49$",
        ),
        (
            "multi_crop_type",
            dict(multi_crop=1),
            TypeError,
            r"Received: multi_crop=1$",
        ),
        (
            "multi_crop_train",
            dict(multi_crop=True),
            ValueError,
            r"needs split='test'\. Received: split=train$",
        ),
        (
            "multi_crop_room",
            dict(split="test", multi_crop=True, crop_size=44),
            ValueError,
            r"image_size - crop_size >= 6\. Received: crop_size=44$",
        ),
        (
            "files_without_dir",
            dict(source="files"),
            ValueError,
            r"must be given\. Received: manual_dir=None$",
        ),
        ("seed", dict(seed="0"), ValueError, r"Received: seed=0$"),
        (
            "download",
            dict(download=None),
            TypeError,
            r"`download` must be a boolean\. Received: download=None$",
        ),
    )
    def test_invalid_arguments(self, kwargs, error, pattern):
        with self.assertRaisesRegex(error, r"^`smallnorb.load`"):
            smallnorb.load(**kwargs)
        with self.assertRaisesRegex(error, pattern):
            smallnorb.load(**kwargs)
