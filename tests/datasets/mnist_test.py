import gzip
import importlib.util
import os
import struct
import subprocess
import sys
from unittest import mock

import keras
import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules import testing
from keras_capsules.datasets import mnist
from tests import non_finite
from tests import references
from tests.datasets import helpers

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
_MNIST_DIR = os.path.join(_REPO, "..", "shared", "data", "mnist")
# Their sizes in bytes, as TFDS registers them.
_ORIGINAL_SIZES = {
    "train-images-idx3-ubyte.gz": 9912422,
    "train-labels-idx1-ubyte.gz": 28881,
    "t10k-images-idx3-ubyte.gz": 1648877,
    "t10k-labels-idx1-ubyte.gz": 4542,
}
_ORIGINAL_FILES = tuple(_ORIGINAL_SIZES)
_HAS_MNIST = all(
    os.path.isfile(os.path.join(_MNIST_DIR, name)) for name in _ORIGINAL_FILES
)
_SAMPLE_PATH = os.path.join(os.path.dirname(mnist.__file__), "mnist_sample.npz")
# Published label counts of the MNIST training and test sets.
_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]

# idx type codes, written independently of the reader under test.
_IDX_CODES = {
    "uint8": 0x08,
    "int8": 0x09,
    "int16": 0x0B,
    "int32": 0x0C,
    "float32": 0x0D,
    "float64": 0x0E,
}


def _write_idx(path, array, compress):
    array = np.asarray(array)
    header = bytes([0, 0, _IDX_CODES[array.dtype.name], array.ndim])
    header += struct.pack(f">{array.ndim}i", *array.shape)
    payload = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
    opener = gzip.open if compress else open
    with opener(path, "wb") as f:
        f.write(payload)


def _load_script():
    path = os.path.join(_REPO, "scripts", "make_mnist_sample.py")
    spec = importlib.util.spec_from_file_location("make_mnist_sample", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shift_with_zero_fill(image, dy, dx):
    """Moves content by (dy, dx) pixels, filling the uncovered border."""
    height, width = image.shape[:2]
    padded = np.pad(image, ((2, 2), (2, 2), (0, 0)))
    return padded[2 - dy : 2 - dy + height, 2 - dx : 2 - dx + width]


def _matching_shifts(image, moved):
    """The shifts (dy, dx) of up to 2 pixels that turn `image` into `moved`."""
    return [
        (dy, dx)
        for dy in range(-2, 3)
        for dx in range(-2, 3)
        if np.array_equal(_shift_with_zero_fill(image, dy, dx), moved)
    ]


# The pipelines' tests (NumPy and tf.data, no Keras backend involved) run
# on the primary backend.
@pytest.mark.primary_backend
class ReadIdxTest(testing.TestCase):
    @parameterized.named_parameters(
        ("uint8_images_gz", (3, 28, 28), "uint8", True),
        ("uint8_labels_raw", (7,), "uint8", False),
        ("int16_raw", (2, 5), "int16", False),
        ("int32_gz", (4, 3), "int32", True),
        ("float32_gz", (2, 3, 4), "float32", True),
        ("float64_raw", (5,), "float64", False),
    )
    def test_round_trip(self, shape, dtype, compress):
        rng = np.random.default_rng(0)
        array = (rng.standard_normal(shape) * 100).astype(dtype)
        path = os.path.join(self.get_temp_dir(), "data-idx")
        _write_idx(path, array, compress)
        result = mnist.read_idx(path)
        self.assertEqual(result.shape, array.shape)
        self.assertEqual(result.dtype, np.dtype(dtype))
        self.assertTrue(result.dtype.isnative)
        np.testing.assert_array_equal(result, array)

    def test_not_idx(self):
        path = os.path.join(self.get_temp_dir(), "bad")
        with open(path, "wb") as f:
            f.write(b"\x1e\x3d\x4c\x55" + bytes(16))
        with self.assertRaisesRegex(ValueError, "not an idx file.*path="):
            mnist.read_idx(path)

    def test_unknown_type_code(self):
        path = os.path.join(self.get_temp_dir(), "bad")
        with open(path, "wb") as f:
            f.write(bytes([0, 0, 0x07, 1]) + struct.pack(">i", 1) + b"x")
        with self.assertRaisesRegex(ValueError, "unknown idx type code"):
            mnist.read_idx(path)

    def test_truncated(self):
        path = os.path.join(self.get_temp_dir(), "bad.gz")
        _write_idx(path, np.zeros((4, 2), "uint8"), compress=True)
        data = gzip.decompress(open(path, "rb").read())[:-1]
        with gzip.open(path, "wb") as f:
            f.write(data)
        with self.assertRaisesRegex(ValueError, "holds 7 bytes"):
            mnist.read_idx(path)

    @pytest.mark.skipif(not _HAS_MNIST, reason="needs ../shared/data/mnist")
    def test_real_labels(self):
        for name, counts in (
            ("train-labels-idx1-ubyte.gz", _TRAIN_COUNTS),
            ("t10k-labels-idx1-ubyte.gz", _TEST_COUNTS),
        ):
            labels = mnist.read_idx(os.path.join(_MNIST_DIR, name))
            self.assertEqual(labels.dtype, np.uint8)
            self.assertEqual(list(np.bincount(labels)), counts)


@pytest.mark.primary_backend
class LoadSampleTest(testing.TestCase):
    @parameterized.named_parameters(
        ("train", "train", 500), ("test", "test", 100)
    )
    def test_shapes_balance_and_range(self, split, per_class):
        x, y = mnist.load_sample(split)
        self.assertEqual(x.shape, (10 * per_class, 28, 28, 1))
        self.assertEqual(y.shape, (10 * per_class, 10))
        self.assertEqual(x.dtype, np.float32)
        self.assertEqual(y.dtype, np.float32)
        self.assertGreaterEqual(x.min(), 0.0)
        self.assertLessEqual(x.max(), 1.0)
        self.assertEqual(x.max(), 1.0)
        np.testing.assert_array_equal(y.sum(axis=1), 1.0)
        self.assertTrue(np.all((y == 0) | (y == 1)))
        np.testing.assert_array_equal(y.sum(axis=0), per_class)
        # Real digits: a quarter or less of the pixels are ink.
        ink = (x > 0.5).mean(axis=(1, 2, 3))
        self.assertTrue(np.all((ink > 0.02) & (ink < 0.4)))

    def test_bad_split(self):
        with self.assertRaisesRegex(
            ValueError, r"`mnist.load_sample`.*Received: split=validation$"
        ):
            mnist.load_sample("validation")

    def test_file_size(self):
        size = os.path.getsize(_SAMPLE_PATH)
        self.assertLess(size, 2 * 1024 * 1024)

    @pytest.mark.skipif(not _HAS_MNIST, reason="needs ../shared/data/mnist")
    def test_matches_original_files(self):
        script = _load_script()
        rebuilt = script.build_arrays(_MNIST_DIR)
        with np.load(_SAMPLE_PATH) as stored:
            self.assertEqual(sorted(stored.files), sorted(rebuilt))
            for name in stored.files:
                np.testing.assert_array_equal(stored[name], rebuilt[name])
        x, y = mnist.load_sample("test")
        images = mnist.read_idx(
            os.path.join(_MNIST_DIR, "t10k-images-idx3-ubyte.gz")
        )
        labels = mnist.read_idx(
            os.path.join(_MNIST_DIR, "t10k-labels-idx1-ubyte.gz")
        )
        index = rebuilt["index_test"]
        np.testing.assert_array_equal(
            np.round(x[..., 0] * 255).astype(np.uint8), images[index]
        )
        np.testing.assert_array_equal(y.argmax(axis=1), labels[index])


# On every backend: the JAX and PyTorch runs are the ones with a framework
# besides TensorFlow installed.
class ImportWithoutTensorFlowTest(testing.TestCase):
    def test_package_imports_without_tensorflow(self):
        # Keras needs a backend other than TensorFlow here, and its NumPy
        # backend imports JAX (and SciPy): with TensorFlow as the only
        # framework installed (the README's test environment), there is
        # none to run on.
        backend = next(
            (
                name
                for name in ("jax", "torch")
                if importlib.util.find_spec(name) is not None
            ),
            None,
        )
        if backend is None:
            self.skipTest("needs JAX or PyTorch installed besides TensorFlow")
        code = (
            "import importlib.abc, sys\n"
            "class Block(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name.split('.')[0] in ('tensorflow',\n"
            "                                  'tensorflow_datasets'):\n"
            "            raise ImportError('blocked ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "import keras_capsules\n"
            "from keras_capsules.datasets import mnist\n"
            "x, y = mnist.load_sample('test')\n"
            "print('SHAPE', x.shape, y.shape)\n"
            "try:\n"
            "    mnist.load()\n"
            "except ImportError as error:\n"
            "    print('IMPORT_ERROR', error)\n"
        )
        env = dict(os.environ, KERAS_BACKEND=backend)
        result = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("SHAPE (1000, 28, 28, 1) (1000, 10)", result.stdout)
        self.assertIn("pip install keras-capsules[datasets]", result.stdout)


@pytest.mark.primary_backend
class ShiftedDigitsTest(testing.TestCase):
    def test_batches_are_shifted_shuffled_digits(self):
        x, y = mnist.load_sample("test")
        x, y = x[:200], y[:200]
        batches = mnist.ShiftedDigits(x, y, batch_size=64, seed=3)
        self.assertLen(batches, 4)  # 3 full batches and one of 8.
        seen, shifts = [], []
        for index in range(len(batches)):
            images, labels = batches[index]
            self.assertEqual(images.shape[1:], (28, 28, 1))
            self.assertEqual(images.dtype, x.dtype)
            self.assertLen(labels, len(images))
            for image, label in zip(images, labels):
                # The label finds the image among the originals it could be.
                candidates = np.flatnonzero((y == label).all(axis=1))
                found = [
                    (i, shift)
                    for i in candidates
                    for shift in _matching_shifts(x[i], image)
                ]
                self.assertNotEmpty(found)
                seen.append(found[0][0])
                shifts.append(found[0][1])
        self.assertLen(images, 8)
        # Every image once per epoch, not in the original order.
        self.assertEqual(sorted(seen), list(range(len(x))))
        self.assertNotEqual(seen, sorted(seen))
        self.assertGreater(len(set(shifts)), 15)  # Of 25.

    def test_seeded_and_reshuffled_each_epoch(self):
        x, y = mnist.load_sample("test")
        first = mnist.ShiftedDigits(x, y, batch_size=100, seed=1)
        again = mnist.ShiftedDigits(x, y, batch_size=100, seed=1)
        other = mnist.ShiftedDigits(x, y, batch_size=100, seed=2)
        images, labels = first[3]
        # A batch does not depend on the batches read before it.
        again[0], again[5], again[3]
        np.testing.assert_array_equal(again[3][0], images)
        np.testing.assert_array_equal(again[3][1], labels)
        self.assertFalse(np.array_equal(other[3][1], labels))
        first.on_epoch_end()
        self.assertEqual(first.epoch, 1)
        self.assertFalse(np.array_equal(first[3][1], labels))

    def test_no_shift(self):
        x, y = mnist.load_sample("test")
        batches = mnist.ShiftedDigits(
            x[:50].tolist(), y[:50], batch_size=20, max_shift=0
        )
        index = {image.tobytes(): i for i, image in enumerate(x[:50])}
        seen = []
        for images, labels in (batches[i] for i in range(len(batches))):
            # A list of floats comes back as float64 images.
            self.assertEqual(images.dtype, "float64")
            rows = [
                index[image.astype("float32").tobytes()] for image in images
            ]
            np.testing.assert_array_equal(labels, y[rows])
            seen += rows
        self.assertEqual(sorted(seen), list(range(50)))

    def test_fit_accepts_it(self):
        x, y = mnist.load_sample("test")
        model = keras.Sequential(
            [keras.Input((28, 28, 1)), keras.layers.Flatten()]
            + [keras.layers.Dense(10, activation="softmax")]
        )
        model.compile(loss="categorical_crossentropy")
        history = model.fit(
            mnist.ShiftedDigits(x[:64], y[:64], batch_size=32),
            epochs=2,
            verbose=0,
        )
        self.assertLen(history.history["loss"], 2)

    def test_processes_share_every_batch_of_the_single_process_stream(self):
        x, y = mnist.load_sample("test")
        x, y = x[:200], y[:200]  # Three batches of 64 and one of 8.
        whole = mnist.ShiftedDigits(x, y, batch_size=64, seed=3)
        for num_processes in (2, 4):
            shares = [
                mnist.ShiftedDigits(
                    x,
                    y,
                    batch_size=64,
                    seed=3,
                    num_processes=num_processes,
                    process_id=p,
                )
                for p in range(num_processes)
            ]
            for epoch in (0, 1):
                whole.epoch = epoch
                for share in shares:
                    share.epoch = epoch
                for index in range(len(whole)):
                    images, labels = whole[index]
                    parts = [share[index] for share in shares]
                    self.assertEqual(
                        {len(part[0]) for part in parts},
                        {len(images) // num_processes},
                    )
                    # In order: process p holds the p-th slice.
                    np.testing.assert_array_equal(
                        np.concatenate([part[0] for part in parts]), images
                    )
                    np.testing.assert_array_equal(
                        np.concatenate([part[1] for part in parts]), labels
                    )

    def test_drop_remainder(self):
        x, y = mnist.load_sample("test")
        batches = mnist.ShiftedDigits(
            x[:200], y[:200], batch_size=64, drop_remainder=True
        )
        # Three full batches; the last 8 images of each epoch's order are
        # left out.
        self.assertLen(batches, 3)
        self.assertEqual([len(batches[i][0]) for i in range(3)], [64] * 3)
        # 200 images at batch 63 leave 11, which 3 processes cannot split.
        share = mnist.ShiftedDigits(
            x[:200],
            y[:200],
            batch_size=63,
            num_processes=3,
            process_id=2,
            drop_remainder=True,
        )
        self.assertLen(share, 3)
        self.assertEqual(share[2][0].shape, (21, 28, 28, 1))
        with self.assertRaisesRegex(TypeError, "Received: drop_remainder=1"):
            mnist.ShiftedDigits(x, y, drop_remainder=1)
        with self.assertRaisesRegex(
            ValueError, r"at least one batch of 128.*x.shape=\(4, 28"
        ):
            mnist.ShiftedDigits(x[:4], y[:4], drop_remainder=True)

    def test_epoch_can_be_set(self):
        x, y = mnist.load_sample("test")
        advanced = mnist.ShiftedDigits(x, y, batch_size=100, seed=1)
        for _ in range(3):
            advanced.on_epoch_end()
        resumed = mnist.ShiftedDigits(x, y, batch_size=100, seed=1)
        resumed.epoch = 3
        self.assertEqual(advanced.epoch, 3)
        for index in (0, 4, 9):
            np.testing.assert_array_equal(advanced[index][0], resumed[index][0])
            np.testing.assert_array_equal(advanced[index][1], resumed[index][1])
        with self.assertRaisesRegex(ValueError, "Received: epoch=-1"):
            resumed.epoch = -1

    @parameterized.named_parameters(
        (
            "images_rank",
            dict(x=np.zeros((4, 28, 28))),
            "argument `x`.*"
            r"Received: x.shape=\(4, 28, 28\)",
        ),
        (
            "labels",
            dict(y=np.zeros((3, 10))),
            "argument `y`.*"
            r"Received: y.shape=\(3, 10\)",
        ),
        (
            "batch_size",
            dict(batch_size=0),
            "batch_size.*Received: batch_size=0",
        ),
        ("seed", dict(seed=-1), "seed.*Received: seed=-1"),
        (
            "max_shift",
            dict(max_shift=1.5),
            "max_shift.*Received: max_shift=1.5",
        ),
        (
            "num_processes",
            dict(num_processes=0),
            "num_processes.*Received: num_processes=0",
        ),
        (
            "process_id",
            dict(num_processes=2, process_id=2),
            r"process_id.*below num_processes \(2\).*"
            "Received: process_id=2",
        ),
        (
            "batch_size_over_processes",
            dict(batch_size=3, num_processes=2),
            r"batch_size.*multiple of num_processes \(2\).*"
            "Received: batch_size=3",
        ),
        (
            "last_batch_over_processes",
            dict(
                x=np.zeros((5, 28, 28, 1)),
                y=np.zeros((5, 10)),
                batch_size=4,
                num_processes=2,
            ),
            r"last batch of the 5 images, 1, must split evenly over "
            r"num_processes \(2\); pass drop_remainder=True.*"
            r"Received: x.shape=\(5, 28, 28, 1\)",
        ),
    )
    def test_invalid_arguments(self, kwargs, pattern):
        arguments = dict(x=np.zeros((4, 28, 28, 1)), y=np.zeros((4, 10)))
        with self.assertRaisesRegex(ValueError, pattern):
            mnist.ShiftedDigits(**{**arguments, **kwargs})

    def test_rejects_non_finite_images(self):
        x, y = mnist.load_sample("test")
        for case, bad in non_finite.non_finite_images(x[:4]).items():
            with self.subTest(case=case):
                with self.assertRaisesRegex(
                    ValueError,
                    r"^`mnist.ShiftedDigits`: argument `x` must hold finite "
                    r"values.*Received: x" + non_finite.RECEIVED[case],
                ):
                    mnist.ShiftedDigits(bad, y[:4])


@pytest.mark.primary_backend
class LoadTest(testing.TestCase):
    def test_shapes_dtypes_and_ranges(self):
        tfds = helpers.tfds_or_skip()
        with tfds.testing.mock_data(num_examples=10):
            dataset = mnist.load("train", batch_size=4, seed=0)
        images_spec, labels_spec = dataset.element_spec
        self.assertEqual(tuple(images_spec.shape), (None, 28, 28, 1))
        self.assertEqual(tuple(labels_spec.shape), (None, 10))
        batches = helpers.batches(dataset)
        self.assertEqual([len(x) for x, _ in batches], [4, 4, 2])
        for x, y in batches:
            self.assertEqual(x.dtype, np.float32)
            self.assertEqual(y.dtype, np.float32)
            self.assertGreaterEqual(x.min(), 0.0)
            self.assertLessEqual(x.max(), 1.0)
            np.testing.assert_array_equal(y.sum(axis=1), 1.0)
            self.assertTrue(np.all((y == 0) | (y == 1)))

    def test_drop_remainder_gives_static_batch(self):
        tfds = helpers.tfds_or_skip()
        with tfds.testing.mock_data(num_examples=10):
            dataset = mnist.load("test", batch_size=4, drop_remainder=True)
        self.assertEqual(tuple(dataset.element_spec[0].shape), (4, 28, 28, 1))
        self.assertEqual([len(x) for x, _ in helpers.batches(dataset)], [4, 4])

    def test_test_split_is_ordered_and_not_augmented(self):
        tfds = helpers.tfds_or_skip()
        with tfds.testing.mock_data(num_examples=6):
            first = helpers.batches(mnist.load("test", batch_size=6))
            second = helpers.batches(mnist.load("test", batch_size=6, seed=5))
            plain = helpers.batches(
                mnist.load("test", batch_size=6, augment=False)
            )
        self.assertAllClose(first[0][0], second[0][0])
        self.assertAllClose(first[0][0], plain[0][0])
        self.assertAllClose(first[0][1], plain[0][1])

    def test_augmentation_shifts_preserve_content(self):
        tfds = helpers.tfds_or_skip()
        with tfds.testing.mock_data(num_examples=16):
            original, labels = helpers.batches(
                mnist.load("test", batch_size=16, augment=False)
            )[0]
            shifted, shifted_labels = helpers.batches(
                mnist.load("test", batch_size=16, augment=True, seed=7)
            )[0]
        self.assertAllClose(shifted_labels, labels)
        shifts = []
        for image, moved in zip(original, shifted):
            matches = _matching_shifts(image, moved)
            self.assertLen(matches, 1)
            shifts.append(matches[0])
        # 16 draws from 25 shifts: all zero would mean no augmentation.
        self.assertGreater(len(set(shifts)), 3)

    def test_seed_makes_pipeline_reproducible(self):
        tfds = helpers.tfds_or_skip()
        with tfds.testing.mock_data(num_examples=12):
            runs = []
            for seed in (3, 3, 4):
                dataset = mnist.load("train", batch_size=12, seed=seed)
                runs.append(helpers.batches(dataset)[0])
            reiterated = mnist.load("train", batch_size=12, seed=3)
            epochs = [helpers.batches(reiterated)[0] for _ in range(2)]
        self.assertAllClose(runs[0][0], runs[1][0])
        self.assertAllClose(runs[0][1], runs[1][1])
        self.assertFalse(np.array_equal(runs[0][0], runs[2][0]))
        # Each epoch draws new shifts and a new order.
        self.assertFalse(np.array_equal(epochs[0][0], epochs[1][0]))

    def test_fit_accepts_dataset(self):
        tfds = helpers.tfds_or_skip()
        with tfds.testing.mock_data(num_examples=8):
            dataset = mnist.load("train", batch_size=4, seed=0)
        model = keras.Sequential(
            [
                keras.Input((28, 28, 1)),
                keras.layers.Flatten(),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )
        model.compile(optimizer="sgd", loss="categorical_crossentropy")
        # Keras 3.15 warns when fit(shuffle=True) gets a tf.data.Dataset.
        history = model.fit(dataset, epochs=1, shuffle=False, verbose=0)
        self.assertTrue(np.isfinite(history.history["loss"][-1]))

    @parameterized.named_parameters(
        (
            "split",
            dict(split="validation"),
            ValueError,
            r'`split` must be "train" or "test"\. Received: split=validation$',
        ),
        (
            "batch_size_zero",
            dict(batch_size=0),
            ValueError,
            r"`batch_size` must be a positive integer\. "
            r"Received: batch_size=0$",
        ),
        (
            "batch_size_bool",
            dict(batch_size=True),
            ValueError,
            r"Received: batch_size=True$",
        ),
        (
            "shuffle_buffer",
            dict(shuffle_buffer=-1),
            ValueError,
            r"Received: shuffle_buffer=-1$",
        ),
        (
            "augment",
            dict(augment="yes"),
            TypeError,
            r"`augment` must be None or a boolean\. Received: augment=yes$",
        ),
        ("seed", dict(seed=1.5), ValueError, r"Received: seed=1.5$"),
        (
            "drop_remainder",
            dict(drop_remainder=None),
            TypeError,
            r"Received: drop_remainder=None$",
        ),
        (
            "manual_dir",
            dict(manual_dir=3),
            TypeError,
            r"Received: manual_dir=3$",
        ),
        (
            "download",
            dict(download="no"),
            TypeError,
            r"`download` must be a boolean\. Received: download=no$",
        ),
    )
    def test_invalid_arguments(self, kwargs, error, pattern):
        with self.assertRaisesRegex(error, r"`mnist.load`"):
            mnist.load(**kwargs)
        with self.assertRaisesRegex(error, pattern):
            mnist.load(**kwargs)

    def test_downloads_through_tfds_by_default(self):
        tfds = helpers.tfds_or_skip()
        data_dir = self.get_temp_dir()
        with tfds.testing.mock_data(num_examples=4):
            with helpers.download_spy(tfds) as (prepare, builder, load):
                dataset = mnist.load("test", batch_size=4, data_dir=data_dir)
        # As `tfds.load("mnist", data_dir=data_dir)` would: the builder of
        # the data directory downloads and prepares with TFDS's defaults,
        # then the prepared copy is read.
        builder.assert_called_once_with("mnist", data_dir=data_dir)
        prepare.assert_called_once()
        (prepared,) = prepare.call_args.args
        self.assertEqual(prepared.name, "mnist")
        self.assertEqual(prepare.call_args.kwargs, {})
        load.assert_called_once()
        self.assertEqual(load.call_args.args, ("mnist",))
        self.assertEqual(load.call_args.kwargs["data_dir"], data_dir)
        self.assertEqual(load.call_args.kwargs["split"], "test")
        self.assertIs(load.call_args.kwargs["download"], False)
        ((x, y),) = helpers.batches(dataset)
        self.assertEqual((x.shape, y.shape), ((4, 28, 28, 1), (4, 10)))

    def test_load_arrays_downloads_by_default(self):
        tfds = helpers.tfds_or_skip()
        data_dir = self.get_temp_dir()
        with tfds.testing.mock_data(num_examples=3):
            with helpers.download_spy(tfds) as (prepare, builder, _):
                images, labels = mnist.load_arrays("train", data_dir=data_dir)
        builder.assert_called_once_with("mnist", data_dir=data_dir)
        prepare.assert_called_once()
        self.assertEqual(prepare.call_args.args[0].name, "mnist")
        self.assertEqual(images.shape, (3, 28, 28))
        self.assertEqual(labels.shape, (3,))

    def test_download_false_without_manual_dir_raises(self):
        tfds = helpers.tfds_or_skip()
        data_dir = self.get_temp_dir()
        with helpers.no_downloads(tfds) as attempts:
            for function in (mnist.load, mnist.load_arrays):
                with self.subTest(function=function.__name__):
                    with self.assertRaisesRegex(
                        FileNotFoundError,
                        r"MNIST is not prepared in .*download=False forbids "
                        r"fetching it\. Pass `manual_dir`: a folder with the "
                        r"four original MNIST files train-images-idx3-ubyte"
                        r"\.gz, .*t10k-labels-idx1-ubyte\.gz, from https://"
                        r".*Received: manual_dir=None, download=False$",
                    ):
                        function(data_dir=data_dir, download=False)
        attempts.assert_not_called()

    def test_failed_download_gives_a_clear_error(self):
        tfds = helpers.tfds_or_skip()
        data_dir = self.get_temp_dir()
        for failure in (
            ConnectionError("Failed to resolve 'storage.googleapis.com'"),
            tfds.download.DownloadError("Failed to get url. HTTP code: 404."),
        ):
            name = type(failure).__name__
            for function in (mnist.load, mnist.load_arrays):
                with self.subTest(failure=name, function=function.__name__):
                    with mock.patch.object(
                        tfds.core.DatasetBuilder,
                        "download_and_prepare",
                        side_effect=failure,
                    ):
                        with self.assertRaisesRegex(
                            OSError,
                            rf"^`mnist\.{function.__name__}`: TensorFlow "
                            r"Datasets could not download and prepare mnist "
                            rf"in .*\({name}: .*\)\. Without network, pass "
                            r"`manual_dir`: a folder with the four original "
                            r"MNIST files train-images-idx3-ubyte\.gz, .*"
                            r"Received: manual_dir=None$",
                        ) as context:
                            function(data_dir=data_dir)
                    self.assertIs(context.exception.__cause__, failure)

    def test_manual_dir_never_downloads(self):
        tfds = helpers.tfds_or_skip()
        data_dir = self.get_temp_dir()
        empty_dir = self.get_temp_dir()
        with helpers.no_downloads(tfds) as attempts:
            with self.assertRaisesRegex(
                FileNotFoundError, r"lacks train-images-idx3-ubyte\.gz"
            ):
                mnist.load(data_dir=data_dir, manual_dir=empty_dir)
            with self.assertRaisesRegex(
                FileNotFoundError, r"lacks t10k-images-idx3-ubyte\.gz"
            ):
                mnist.load_arrays(
                    "test", data_dir=data_dir, manual_dir=empty_dir
                )
        attempts.assert_not_called()
        self.assertEqual(os.listdir(empty_dir), [])
        # Files of the original sizes pass the size check and reach TFDS,
        # which builds from them offline: their checksums fail, and nothing
        # is fetched instead.
        manual_dir = self.get_temp_dir()
        for name in _ORIGINAL_FILES:
            with open(os.path.join(manual_dir, name), "wb") as f:
                f.truncate(_ORIGINAL_SIZES[name])
        with helpers.no_network() as attempts:
            with self.assertRaises(Exception) as context:
                mnist.load(data_dir=data_dir, manual_dir=manual_dir)
        attempts.assert_not_called()
        self.assertIn("checksum", str(context.exception).lower())

    def test_no_downloads_stops_a_download(self):
        # The guard of the test above catches TFDS's download entry point.
        tfds = helpers.tfds_or_skip()
        builder = tfds.builder("mnist", data_dir=self.get_temp_dir())
        with helpers.no_downloads(tfds) as attempts:
            with self.assertRaises(helpers.DownloadAttempted):
                builder.download_and_prepare()
        attempts.assert_called_once_with(
            "core.DatasetBuilder.download_and_prepare"
        )

    def test_wrong_files_fail_fast(self):
        helpers.tfds_or_skip()
        manual_dir = self.get_temp_dir()
        for name in _ORIGINAL_FILES:
            with open(os.path.join(manual_dir, name), "wb") as f:
                f.write(b"not mnist")
        with self.assertRaisesRegex(
            ValueError, r"differ from the originals.*9 bytes, expected"
        ):
            mnist.load(data_dir=self.get_temp_dir(), manual_dir=manual_dir)

    def test_missing_tfds_raises_actionable_import_error(self):
        with helpers.without_tfds():
            with self.assertRaisesRegex(
                ImportError,
                r"`mnist.load`.*pip install keras-capsules\[datasets\]",
            ):
                mnist.load()

    @pytest.mark.large
    @pytest.mark.skipif(not _HAS_MNIST, reason="needs ../shared/data/mnist")
    def test_builds_from_original_files(self):
        data_dir = self.get_temp_dir()
        with helpers.no_network() as attempts:
            dataset = mnist.load(
                "test",
                batch_size=1000,
                manual_dir=_MNIST_DIR,
                data_dir=data_dir,
            )
        attempts.assert_not_called()
        counts = np.zeros(10)
        for x, y in helpers.batches(dataset):
            counts += y.sum(axis=0)
            self.assertLessEqual(x.max(), 1.0)
        np.testing.assert_array_equal(counts, _TEST_COUNTS)
        # Prepared now: no manual_dir needed any more.
        train = mnist.load("train", batch_size=60000, data_dir=data_dir)
        ((x, y),) = helpers.batches(train)
        self.assertEqual(x.shape, (60000, 28, 28, 1))
        np.testing.assert_array_equal(y.sum(axis=0), _TRAIN_COUNTS)


@pytest.mark.primary_backend
class PaddedDigitsTest(testing.TestCase):
    def test_offsets_follow_the_official_pad_and_shift(self):
        image = np.random.default_rng(0).uniform(size=(28, 28, 1))
        for shift in range(-12, 13):
            expected = references.scae_pad_and_shift(image, 40, shift, -shift)
            row = mnist.canvas_offsets(shift, 28, 40)
            col = mnist.canvas_offsets(-shift, 28, 40)
            placed = np.zeros((40, 40, 1))
            placed[row : row + 28, col : col + 28] = image
            np.testing.assert_array_equal(placed, expected)

    def test_offset_distribution(self):
        offsets = mnist.canvas_offsets(np.arange(-12, 13), 28, 40)
        counts = np.bincount(offsets, minlength=13)
        self.assertEqual(counts.tolist(), [1] + [2] * 12)

    def test_batches(self):
        x, y = mnist.load_sample("test")
        batches = mnist.PaddedDigits(x, y, batch_size=64, seed=3)
        self.assertEqual(len(batches), 16)
        images, labels = batches[2]
        self.assertEqual(images.shape, (64, 40, 40, 1))
        self.assertEqual(labels.shape, (64, 10))
        # Every digit lands whole on the canvas, at its label.
        order = batches._order[128:192]
        self.assertAllClose(labels, y[order])
        self.assertAllClose(images.sum(axis=(1, 2, 3)), x[order].sum((1, 2, 3)))
        # The same seed gives the same batch; the next epoch another.
        again = mnist.PaddedDigits(x, y, batch_size=64, seed=3)[2][0]
        np.testing.assert_array_equal(images, again)
        batches.on_epoch_end()
        self.assertFalse(np.array_equal(images, batches[2][0]))

    def test_unlabelled_and_unshuffled(self):
        x, _ = mnist.load_sample("test")
        batches = mnist.PaddedDigits(
            x[:10], batch_size=4, shuffle=False, drop_remainder=True
        )
        self.assertEqual(len(batches), 2)
        images = batches[1]
        self.assertEqual(images.shape, (4, 40, 40, 1))
        self.assertAllClose(images.sum((1, 2, 3)), x[4:8].sum((1, 2, 3)))
        batches.on_epoch_end()
        self.assertAllClose(batches[1].sum((1, 2, 3)), x[4:8].sum((1, 2, 3)))

    def test_invalid_arguments(self):
        x = np.zeros((4, 28, 28, 1))
        with self.assertRaisesRegex(ValueError, "canvas_size=20"):
            mnist.PaddedDigits(x, canvas_size=20)
        with self.assertRaisesRegex(ValueError, r"y.shape=\(3,\)"):
            mnist.PaddedDigits(x, np.zeros(3))
        with self.assertRaisesRegex(ValueError, r"x.shape=\(4, 28, 28\)"):
            mnist.PaddedDigits(np.zeros((4, 28, 28)))
        with self.assertRaisesRegex(ValueError, "NaN"):
            mnist.PaddedDigits(np.full((4, 28, 28, 1), np.nan))

    @parameterized.named_parameters(
        ("labelled_shuffled", True, True),
        ("labelled_in_order", True, False),
        ("unlabelled_shuffled", False, True),
        ("unlabelled_in_order", False, False),
    )
    def test_processes_share_every_batch_of_the_single_process_stream(
        self, labelled, shuffle
    ):
        x, y = mnist.load_sample("test")
        x, y = x[:200], (y[:200] if labelled else None)
        # Three batches of 64 and one of 8.
        arguments = dict(batch_size=64, seed=3, shuffle=shuffle)
        whole = mnist.PaddedDigits(x, y, **arguments)
        for num_processes in (2, 4):
            shares = [
                mnist.PaddedDigits(
                    x,
                    y,
                    **arguments,
                    num_processes=num_processes,
                    process_id=p,
                )
                for p in range(num_processes)
            ]
            for epoch in (0, 1):
                whole.epoch = epoch
                for share in shares:
                    share.epoch = epoch
                for index in range(len(whole)):
                    batch = whole[index]
                    parts = [share[index] for share in shares]
                    if not labelled:
                        batch = (batch,)
                        parts = [(part,) for part in parts]
                    self.assertEqual(
                        {len(part[0]) for part in parts},
                        {len(batch[0]) // num_processes},
                    )
                    # In order, at the offsets of the single-process
                    # stream: process p holds the p-th slice.
                    for i, expected in enumerate(batch):
                        np.testing.assert_array_equal(
                            np.concatenate([part[i] for part in parts]),
                            expected,
                        )

    def test_single_process_batches_are_unchanged(self):
        # The offsets of a batch are drawn as before num_processes existed.
        x, y = mnist.load_sample("test")
        images, labels = mnist.PaddedDigits(x[:100], y[:100], batch_size=50)[1]
        order = np.random.default_rng([0, 0]).permutation(100)[50:]
        rng = np.random.default_rng([0, 0, 1])
        rows = mnist.canvas_offsets(rng.integers(-12, 13, 50), 28, 40)
        cols = mnist.canvas_offsets(rng.integers(-12, 13, 50), 28, 40)
        expected = np.zeros((50, 40, 40, 1), "float32")
        for i, (row, col) in enumerate(zip(rows, cols)):
            expected[i, row : row + 28, col : col + 28] = x[order[i]]
        np.testing.assert_array_equal(images, expected)
        np.testing.assert_array_equal(labels, y[order])
        share = mnist.PaddedDigits(
            x[:100], y[:100], batch_size=50, num_processes=5, process_id=3
        )[1]
        np.testing.assert_array_equal(share[0], expected[30:40])
        np.testing.assert_array_equal(share[1], y[order[30:40]])

    def test_drop_remainder_over_processes(self):
        x, _ = mnist.load_sample("test")
        # 200 images at batch 63 leave 11, which 3 processes cannot split.
        with self.assertRaisesRegex(
            ValueError,
            r"^`mnist.PaddedDigits`: the last batch of the 200 images, 11, "
            r"must split evenly over num_processes \(3\); pass "
            r"drop_remainder=True.*Received: x.shape=\(200, 28, 28, 1\)$",
        ):
            mnist.PaddedDigits(
                x[:200], batch_size=63, num_processes=3, process_id=2
            )
        share = mnist.PaddedDigits(
            x[:200],
            batch_size=63,
            num_processes=3,
            process_id=2,
            drop_remainder=True,
        )
        self.assertLen(share, 3)
        self.assertEqual(share[2].shape, (21, 40, 40, 1))

    @parameterized.named_parameters(
        (
            "num_processes",
            dict(num_processes=0),
            "num_processes.*Received: num_processes=0",
        ),
        (
            "process_id_negative",
            dict(num_processes=2, process_id=-1),
            "process_id.*Received: process_id=-1",
        ),
        (
            "process_id",
            dict(num_processes=2, process_id=2),
            r"process_id.*below num_processes \(2\).*"
            "Received: process_id=2",
        ),
        (
            "batch_size_over_processes",
            dict(batch_size=3, num_processes=2),
            r"batch_size.*multiple of num_processes \(2\).*"
            "Received: batch_size=3",
        ),
        (
            "last_batch_over_processes",
            dict(x=np.zeros((5, 28, 28, 1)), batch_size=4, num_processes=2),
            r"last batch of the 5 images, 1, must split evenly over "
            r"num_processes \(2\); pass drop_remainder=True.*"
            r"Received: x.shape=\(5, 28, 28, 1\)",
        ),
    )
    def test_invalid_process_arguments(self, kwargs, pattern):
        arguments = dict(x=np.zeros((4, 28, 28, 1)), batch_size=4)
        with self.assertRaisesRegex(
            ValueError, r"^`mnist.PaddedDigits`: .*" + pattern + "$"
        ):
            mnist.PaddedDigits(**{**arguments, **kwargs})

    def test_process_arguments_are_keyword_only(self):
        x = np.zeros((4, 28, 28, 1))
        with self.assertRaises(TypeError):
            mnist.PaddedDigits(x, None, 40, 4, 0, True, False, 2, 1)
