"""MNIST input pipelines for capsule networks.

`load` builds the `tf.data` pipeline used to train CapsNet (Sabour et al.,
2017) from TensorFlow Datasets: downloaded on first use like
`tfds.load("mnist")`, or built offline from the four original idx files when
`manual_dir` is given. `load_sample` returns a small balanced subset that ships
with the package and needs only NumPy, for tests, docs and quick experiments.
`ShiftedDigits` feeds NumPy arrays to `fit` with the paper's random shifts on
any backend, and `PaddedDigits` places them on the larger canvas of Stacked
Capsule Autoencoders. `read_idx` reads the original idx files.

MNIST is by Yann LeCun and Corinna Cortes, licensed CC BY-SA 3.0; see
`MNIST_SAMPLE.md` next to this module.
"""

import os
import struct

import keras
import numpy as np

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_image_values
from keras_capsules._validation import check_int
from keras_capsules._validation import check_option
from keras_capsules._validation import check_path
from keras_capsules._validation import check_positive_int
from keras_capsules.datasets import _common

NUM_CLASSES = 10
IMAGE_SHAPE = (28, 28, 1)

# Sabour et al. (2017), section 5: "shifted by up to 2 pixels in each
# direction with zero padding".
_MAX_SHIFT = 2
_DEFAULT_SHUFFLE_BUFFER = 10000

# Sizes in bytes of the original files, as registered by TensorFlow Datasets.
_ORIGINAL_SIZES = {
    "train-images-idx3-ubyte.gz": 9912422,
    "train-labels-idx1-ubyte.gz": 28881,
    "t10k-images-idx3-ubyte.gz": 1648877,
    "t10k-labels-idx1-ubyte.gz": 4542,
}
_FILES = tuple(_ORIGINAL_SIZES)
_HOW_TO_GET_FILES = (
    f"a folder with the four original MNIST files {', '.join(_FILES)}, "
    "from https://storage.googleapis.com/cvdf-datasets/mnist/ (the mirror "
    "that TensorFlow Datasets downloads from) or "
    "http://yann.lecun.com/exdb/mnist/."
)

_SAMPLE_PATH = os.path.join(os.path.dirname(__file__), "mnist_sample.npz")

# Type codes of the idx format (third byte of the magic number); the payload
# is big-endian.
_IDX_DTYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path):
    """Reads an idx file (the original MNIST format) into a NumPy array.

    The idx format is a 4-byte magic number (two zero bytes, a type code and
    the number of dimensions), one big-endian int32 per dimension, then the
    data in C order. Gzipped files (`.gz`, detected from their content) are
    decompressed on the fly.

    Args:
        path: Path of an idx file, gzipped or not, for example
            `"train-images-idx3-ubyte.gz"`.

    Returns:
        A NumPy array with the shape and dtype stored in the file, in native
        byte order (`uint8` for the MNIST images and labels).

    Raises:
        ValueError: If the file is not a valid idx file.

    Example:

    ```python
    images = keras_capsules.datasets.mnist.read_idx(
        "mnist/train-images-idx3-ubyte.gz"
    )  # (60000, 28, 28) uint8
    ```
    """
    data = _common.read_maybe_gzipped(path)
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(
            "`read_idx`: the file is not an idx file (its magic number must "
            f"start with two zero bytes). Received: path={path}"
        )
    type_code, ndim = data[2], data[3]
    if type_code not in _IDX_DTYPES:
        raise ValueError(
            f"`read_idx`: unknown idx type code {type_code:#04x}; expected "
            f"one of {sorted(_IDX_DTYPES)}. Received: path={path}"
        )
    dtype = _IDX_DTYPES[type_code]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(
            f"`read_idx`: the file is truncated inside its header. "
            f"Received: path={path}"
        )
    shape = struct.unpack(f">{ndim}i", data[4:header])
    count = int(np.prod(shape, dtype=np.int64))
    if len(data) - header != count * dtype.itemsize:
        raise ValueError(
            f"`read_idx`: the header announces shape {shape} "
            f"({count * dtype.itemsize} bytes of data) but the file holds "
            f"{len(data) - header} bytes. Received: path={path}"
        )
    array = np.frombuffer(data, dtype=dtype, count=count, offset=header)
    return array.reshape(shape).astype(dtype.newbyteorder("="))


def load_arrays(
    split="train", manual_dir=None, data_dir=None, *, download=True
):
    """Loads a whole MNIST split as NumPy arrays of the original values.

    With `manual_dir`, the two idx files of the split are read from there
    (`train-*` or `t10k-*`, gzipped or not, with or without the `.gz`
    suffix) and TensorFlow is not needed. Without it, the split is read
    from the dataset prepared by TensorFlow Datasets in `data_dir`, which
    TFDS downloads and prepares first if needed (see `load`). The
    generators of `multi_mnist` and `affine_mnist` start from these arrays.

    Args:
        split: `"train"` or `"test"`. Defaults to `"train"`.
        manual_dir: Optional folder with the original idx files. Defaults
            to `None`.
        data_dir: TFDS data directory holding (or receiving) the prepared
            dataset, used when `manual_dir` is `None`. `None` uses the TFDS
            default. Defaults to `None`.
        download: Keyword-only bool. Without `manual_dir`, whether TFDS
            may download MNIST when it is not prepared in `data_dir`;
            `False` raises instead. Ignored with `manual_dir`, which never
            downloads. Defaults to `True`.

    Returns:
        A tuple `(images, labels)`: `images` uint8 of shape `(N, 28, 28)`,
        `labels` uint8 class indices of shape `(N,)`: in the order of the
        idx files, or in the order TFDS stores them.

    Raises:
        ValueError: If `split` is invalid or a file is not an idx file.
        TypeError: If a path argument or `download` has the wrong type.
        FileNotFoundError: If `manual_dir` lacks a file of the split, or,
            without `manual_dir`, if the dataset is not prepared and
            `download=False`.
        OSError: If, without `manual_dir`, the download fails (offline,
            for example); the message says how to pass `manual_dir`.
        ImportError: If, without `manual_dir`, TensorFlow or TensorFlow
            Datasets is not installed.

    Example:

    ```python
    images, labels = keras_capsules.datasets.mnist.load_arrays(
        "test", manual_dir="data/mnist"
    )  # (10000, 28, 28) and (10000,), uint8
    ```
    """
    fn = "mnist.load_arrays"
    check_option(split, "split", _common.SPLITS, owner=fn)
    check_path(manual_dir, "manual_dir", owner=fn)
    check_path(data_dir, "data_dir", owner=fn)
    check_bool(download, "download", owner=fn)
    if manual_dir is not None:
        manual_dir = os.path.expanduser(os.fspath(manual_dir))
        prefix = "train" if split == "train" else "t10k"
        arrays = []
        for kind in ("images-idx3", "labels-idx1"):
            name = f"{prefix}-{kind}-ubyte"
            paths = [
                os.path.join(manual_dir, name + ext) for ext in (".gz", "")
            ]
            path = next((p for p in paths if os.path.isfile(p)), None)
            if path is None:
                raise FileNotFoundError(
                    f"`{fn}`: `manual_dir` lacks {name}.gz (or {name}). "
                    f"Received: manual_dir={manual_dir}"
                )
            arrays.append(read_idx(path))
        images, labels = arrays
    else:
        _common.import_tensorflow(fn)
        tfds = _common.import_tfds(fn)
        dataset = _load_tfds(
            tfds, split, None, data_dir, None, False, download, fn=fn
        )
        images, labels = dataset.batch(1 << 20).get_single_element()
        images = images.numpy()[..., 0]
        labels = labels.numpy()
    if len(images) != len(labels):
        raise ValueError(
            f"`{fn}`: {len(images)} images but {len(labels)} labels. "
            f"Received: manual_dir={manual_dir}"
        )
    return images.astype("uint8"), labels.astype("uint8")


def load_sample(split="train"):
    """Loads the small MNIST sample embedded in the package.

    The sample holds 5000 training images (500 per class) and 1000 test images
    (100 per class), chosen deterministically and evenly spread over the
    original MNIST training and test sets (see
    `scripts/make_mnist_sample.py`). It needs only NumPy, so it suits unit
    tests, documentation and smoke runs on any backend.

    Args:
        split: `"train"` or `"test"`. Defaults to `"train"`.

    Returns:
        A tuple `(x, y)` of NumPy arrays: `x` float32 images of shape
        `(N, 28, 28, 1)` with values in `[0, 1]`, `y` float32 one-hot labels
        of shape `(N, 10)`, in the order of the original data set.

    Raises:
        ValueError: If `split` is not `"train"` or `"test"`.

    Example:

    >>> import keras_capsules
    >>> x, y = keras_capsules.datasets.mnist.load_sample("test")
    >>> x.shape, y.shape
    ((1000, 28, 28, 1), (1000, 10))
    """
    check_option(split, "split", _common.SPLITS, owner="mnist.load_sample")
    with np.load(_SAMPLE_PATH) as sample:
        images = sample[f"x_{split}"]
        labels = sample[f"y_{split}"]
    x = images.astype("float32")[..., None] / np.float32(255.0)
    y = np.eye(NUM_CLASSES, dtype="float32")[labels]
    return x, y


def _check_arrays(x, y, owner):
    """`x` (checked images, `(N, height, width, channels)`, finite) and
    `y` (one row per image, or `None`) as arrays."""
    x = np.asarray(x)
    if x.ndim != 4:
        raise ValueError(
            f"`{owner}`: argument `x` must be an array of shape (N, "
            f"height, width, channels). Received: x.shape={x.shape}"
        )
    if y is not None:
        y = np.asarray(y)
        if y.ndim < 1 or len(y) != len(x):
            raise ValueError(
                f"`{owner}`: argument `y` must hold one label per image of "
                f"x ({len(x)}). Received: y.shape={y.shape}"
            )
    # A NaN pixel would otherwise surface only as a NaN loss in fit.
    return check_image_values(x, "x", owner=owner), y


class _SeededBatches(keras.utils.PyDataset):
    """What the NumPy datasets share: batches of `self.x` in an order drawn
    from `(self.seed, self.epoch)`, reshuffled every epoch when
    `self.shuffle`; `epoch` can be set. Process `self.process_id` of
    `self.num_processes` takes the `process_id`-th slice of every batch."""

    shuffle = True
    drop_remainder = False
    num_processes = 1
    process_id = 0

    @property
    def epoch(self):
        """The epoch whose order and augmentation the batches follow."""
        return self._epoch

    @epoch.setter
    def epoch(self, value):
        self._epoch = check_int(value, "epoch", owner=self._owner)
        if self.shuffle:
            rng = np.random.default_rng([self.seed, self._epoch])
            self._order = rng.permutation(len(self.x))
        else:
            self._order = np.arange(len(self.x))

    def _check_processes(self, num_processes, process_id):
        """Sets `num_processes` and `process_id`; raises unless `process_id`
        is below `num_processes` and `self.batch_size` a multiple of it."""
        owner = self._owner
        self.num_processes = check_positive_int(
            num_processes, "num_processes", owner
        )
        self.process_id = check_int(process_id, "process_id", owner=owner)
        if self.process_id >= self.num_processes:
            raise ValueError(
                f"`{owner}`: argument `process_id` must be below "
                f"num_processes ({self.num_processes}). "
                f"Received: process_id={process_id}"
            )
        # Every process must feed a batch of the same shape, else JAX
        # cannot assemble the global batch.
        if self.batch_size % self.num_processes:
            raise ValueError(
                f"`{owner}`: argument `batch_size` must be a multiple of "
                f"num_processes ({self.num_processes}). "
                f"Received: batch_size={self.batch_size}"
            )

    def _check_drop_remainder(self, drop_remainder):
        """Sets `drop_remainder`; raises unless `self.x` holds a batch when
        it is `True`, and the last batch splits over the processes."""
        self.drop_remainder = check_bool(
            drop_remainder, "drop_remainder", owner=self._owner
        )
        if self.drop_remainder and len(self.x) < self.batch_size:
            raise ValueError(
                f"`{self._owner}`: with drop_remainder=True, x must hold at "
                f"least one batch of {self.batch_size} images. "
                f"Received: x.shape={self.x.shape}"
            )
        last = 0 if self.drop_remainder else len(self.x) % self.batch_size
        if last % self.num_processes:
            raise ValueError(
                f"`{self._owner}`: the last batch of the {len(self.x)} "
                f"images, {last}, must split evenly over num_processes "
                f"({self.num_processes}); pass drop_remainder=True or a "
                f"number of images that does. "
                f"Received: x.shape={self.x.shape}"
            )

    def _batch(self, index):
        """The indices into `self.x` of batch `index`, for all processes."""
        return self._order[index * self.batch_size :][: self.batch_size]

    def _share(self, batch, *draws):
        """This process's slice of `batch` and of each per-image draw.

        The draws are made for the whole batch, so that a process's share
        has the draws it has in the single-process stream.
        """
        share = len(batch) // self.num_processes
        start = self.process_id * share
        chosen = slice(start, start + share)
        return (batch[chosen],) + tuple(draw[chosen] for draw in draws)

    def __len__(self):
        if self.drop_remainder:
            return len(self.x) // self.batch_size
        return -(-len(self.x) // self.batch_size)

    def on_epoch_end(self):
        self.epoch += 1


class ShiftedDigits(_SeededBatches):
    """Shuffled training batches of NumPy images, each randomly shifted.

    Each image is shifted by a random integer number of pixels, up to
    `max_shift` in each direction, with zero fill (zero-padded by
    `max_shift`, then randomly cropped back to its size): the augmentation
    that `load(augment=True)` applies in `tf.data`, here in NumPy for every
    backend. The order is reshuffled after every epoch.

    The order of an epoch is drawn from `(seed, epoch)` and the shifts of a
    batch from `(seed, epoch, index)`, so a batch does not depend on which
    batches were read before it: the same seed gives the same batches on
    every backend, with any number of workers, however often Keras reads a
    batch ahead (TensorFlow reads two to learn their shapes).

    `epoch` advances at the end of every epoch. A run resumed by
    `keras.callbacks.BackupAndRestore` starts `fit` at a later epoch: pass
    `keras_capsules.callbacks.DatasetEpoch(dataset)` to `fit`, with
    `shuffle=False` (Keras would otherwise shuffle the batches with
    Python's global random state), and the resumed run trains on the
    batches of an uninterrupted one.

    Data-parallel training over several processes (hosts), each feeding
    its own share of every batch (`keras.distribution.DataParallel(
    auto_shard_dataset=False)`): give every process the same `x`, `y`,
    `batch_size` and `seed`, and its own `process_id`. Process `p` of
    `num_processes` then takes the `p`-th slice of each batch of the
    single-process stream, `batch_size // num_processes` images, with the
    shifts they have there; the slices of all processes make up that
    stream.

    Sabour et al., 2017, [Dynamic Routing Between Capsules](
    https://arxiv.org/abs/1710.09829), section 5.

    Args:
        x: Images, an array of shape `(N, height, width, channels)`.
        y: Labels, an array of `N` rows.
        batch_size: Positive int, images per batch (the last batch may be
            smaller), over all processes. Defaults to `128`.
        seed: Int `>= 0` seeding the order and the shifts. Defaults to `0`.
        max_shift: Int `>= 0`, the largest shift in pixels along each axis.
            Defaults to `2`, the paper's.
        num_processes: Positive int, the number of processes that share
            every batch; `batch_size` and the size of the last batch must
            be multiples of it. Defaults to `1`.
        process_id: Int in `[0, num_processes)`, the share this process
            takes. Defaults to `0`.
        drop_remainder: Bool, whether to leave out the last batch when it
            is smaller than `batch_size` (its images are then seen in other
            epochs' batches): every batch then splits over all the devices
            of a job whose global batch does. Defaults to `False`.
        **kwargs: `workers`, `use_multiprocessing` and `max_queue_size` of
            `keras.utils.PyDataset`.

    Raises:
        ValueError: If `x` is not of rank 4 or holds NaN or an infinity,
            `y` does not hold one row per image, a batch cannot be split
            evenly over `num_processes`, or another argument is out of its
            range.
        TypeError: If `drop_remainder` is not a bool.

    Example:

    >>> import keras_capsules
    >>> from keras_capsules.datasets import mnist
    >>> x, y = mnist.load_sample("test")
    >>> batches = mnist.ShiftedDigits(x, y, batch_size=100)
    >>> len(batches), batches[0][0].shape
    (10, (100, 28, 28, 1))
    >>> share = mnist.ShiftedDigits(
    ...     x, y, batch_size=100, num_processes=2, process_id=1
    ... )
    >>> len(share), share[0][0].shape
    (10, (50, 28, 28, 1))
    """

    def __init__(
        self,
        x,
        y,
        batch_size=128,
        seed=0,
        max_shift=_MAX_SHIFT,
        *,
        num_processes=1,
        process_id=0,
        drop_remainder=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        owner = self._owner = "mnist.ShiftedDigits"
        if y is None:
            raise ValueError(
                f"`{owner}`: argument `y` must hold one label per image of "
                "x. Received: y=None"
            )
        self.x, self.y = _check_arrays(x, y, owner)
        self.batch_size = check_positive_int(batch_size, "batch_size", owner)
        self.seed = check_int(seed, "seed", owner=owner)
        self.max_shift = check_int(max_shift, "max_shift", owner=owner)
        self._check_processes(num_processes, process_id)
        self._check_drop_remainder(drop_remainder)
        self.epoch = 0

    def __getitem__(self, index):
        batch = self._batch(index)
        m = self.max_shift
        height, width = self.x.shape[1:3]
        rng = np.random.default_rng([self.seed, self.epoch, index])
        rows, cols = rng.integers(0, 2 * m + 1, size=(2, len(batch)))
        batch, rows, cols = self._share(batch, rows, cols)
        padded = np.pad(self.x[batch], ((0, 0), (m, m), (m, m), (0, 0)))
        images = [
            image[r : r + height, c : c + width]
            for image, r, c in zip(padded, rows, cols)
        ]
        return np.stack(images), self.y[batch]


def canvas_offsets(shifts, image_size, canvas_size):
    """Where the official Stacked Capsule Autoencoders pipeline puts an
    image on its canvas: the rows (or columns) of padding before it.

    The official `pad_and_shift` draws a shift `s` uniformly from the
    integers in `[-(canvas_size - image_size), canvas_size - image_size]`
    for each axis, pads `|s|` on one side (before the image for `s < 0`,
    after it otherwise), then splits the rest of the canvas evenly, the
    odd row before. The offset is therefore not `s` plus a constant: it
    runs from 0 to `canvas_size - image_size` and is not uniform: for MNIST
    on 40x40, offset 0 has probability 1/25 and each of the offsets 1 to
    12 has 2/25.

    Args:
        shifts: Int array of drawn shifts.
        image_size: The image's size along the axis.
        canvas_size: The canvas's size along the axis.

    Returns:
        An int array of offsets, the shape of `shifts`.
    """
    shifts = np.asarray(shifts)
    spare = np.maximum(canvas_size - (image_size + np.abs(shifts)), 0)
    return np.maximum(-shifts, 0) + spare // 2 + spare % 2


class PaddedDigits(_SeededBatches):
    """Batches of images placed at random on a larger canvas, as the
    official Stacked Capsule Autoencoders input pipeline places them.

    Every image is put on a `canvas_size` square of zeros at the offsets
    of `canvas_offsets`, drawn afresh for every image of every epoch (the
    official `pad_and_shift` with `shift=None`; MNIST's 28x28 digits on
    the official 40x40 canvas move by up to 12 pixels). The official
    pipeline reads the data in one fixed order; here the order is
    reshuffled every epoch unless `shuffle=False`.

    Batches are `x` alone (for unsupervised `fit(x)`) or `(x, y)` when
    labels are given. The order of an epoch is drawn from `(seed, epoch)`
    and the offsets of a batch from `(seed, epoch, index)`, so the same
    seed gives the same batches on every backend, however Keras reads them;
    pass `keras_capsules.callbacks.DatasetEpoch(dataset)` and
    `shuffle=False` to `fit` to resume a run on the same batches.

    As in `ShiftedDigits`, processes of a data-parallel job can share every
    batch: give every process the same arguments and its own `process_id`.
    Process `p` of `num_processes` then takes the `p`-th slice of each
    batch of the single-process stream, `batch_size // num_processes`
    images, at the offsets they have there; the slices of all processes
    make up that stream.

    Kosiorek et al., 2019, [Stacked Capsule Autoencoders](
    https://arxiv.org/abs/1906.06818), section 4.

    Args:
        x: Images, an array of shape `(N, height, width, channels)`, floats
            in `[0, 1]` or `uint8` (passed on as they are).
        y: Optional labels, an array of `N` rows. Defaults to `None`.
        canvas_size: Int at least the images' height and width. Defaults
            to `40`.
        batch_size: Positive int, images per batch over all processes.
            Defaults to `128`, the official batch.
        seed: Int `>= 0`. Defaults to `0`.
        shuffle: Bool, whether to reshuffle every epoch. Defaults to
            `True`.
        drop_remainder: Bool, whether to leave out the last, smaller
            batch. Defaults to `False`.
        num_processes: Keyword-only positive int, the number of processes
            that share every batch; `batch_size` and the size of the last
            batch must be multiples of it. Defaults to `1`.
        process_id: Keyword-only int in `[0, num_processes)`, the share
            this process takes. Defaults to `0`.
        **kwargs: `workers`, `use_multiprocessing` and `max_queue_size` of
            `keras.utils.PyDataset`.

    Raises:
        ValueError: If `x` is not of rank 4 or holds NaN or an infinity,
            `y` does not hold one row per image, a batch cannot be split
            evenly over `num_processes`, or another argument is out of its
            range.
        TypeError: If `shuffle` or `drop_remainder` is not a bool.

    Example:

    >>> from keras_capsules.datasets import mnist
    >>> x, y = mnist.load_sample("test")
    >>> batches = mnist.PaddedDigits(x, batch_size=100)
    >>> len(batches), batches[0].shape
    (10, (100, 40, 40, 1))
    >>> images, labels = mnist.PaddedDigits(x, y, batch_size=100)[0]
    >>> labels.shape
    (100, 10)
    >>> share = mnist.PaddedDigits(
    ...     x, batch_size=100, num_processes=2, process_id=1
    ... )
    >>> len(share), share[0].shape
    (10, (50, 40, 40, 1))
    """

    def __init__(
        self,
        x,
        y=None,
        canvas_size=40,
        batch_size=128,
        seed=0,
        shuffle=True,
        drop_remainder=False,
        *,
        num_processes=1,
        process_id=0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        owner = self._owner = "mnist.PaddedDigits"
        self.x, self.y = _check_arrays(x, y, owner)
        self.canvas_size = check_positive_int(canvas_size, "canvas_size", owner)
        if self.canvas_size < max(self.x.shape[1:3]):
            raise ValueError(
                f"`{owner}`: argument `canvas_size` must be at least the "
                f"images' height and width {self.x.shape[1:3]}. "
                f"Received: canvas_size={canvas_size}"
            )
        self.batch_size = check_positive_int(batch_size, "batch_size", owner)
        self.seed = check_int(seed, "seed", owner=owner)
        self.shuffle = check_bool(shuffle, "shuffle", owner=owner)
        self._check_processes(num_processes, process_id)
        self._check_drop_remainder(drop_remainder)
        self.epoch = 0

    def __getitem__(self, index):
        batch = self._batch(index)
        height, width = self.x.shape[1:3]
        rng = np.random.default_rng([self.seed, self.epoch, index])
        spare_rows = self.canvas_size - height
        spare_cols = self.canvas_size - width
        rows = canvas_offsets(
            rng.integers(-spare_rows, spare_rows + 1, len(batch)),
            height,
            self.canvas_size,
        )
        cols = canvas_offsets(
            rng.integers(-spare_cols, spare_cols + 1, len(batch)),
            width,
            self.canvas_size,
        )
        batch, rows, cols = self._share(batch, rows, cols)
        canvas = np.zeros(
            (len(batch), self.canvas_size, self.canvas_size) + self.x.shape[3:],
            dtype=self.x.dtype,
        )
        for i, (image, row, col) in enumerate(zip(self.x[batch], rows, cols)):
            canvas[i, row : row + height, col : col + width] = image
        if self.y is None:
            return canvas
        return canvas, self.y[batch]


def load(
    split="train",
    batch_size=128,
    shuffle_buffer=None,
    augment=None,
    manual_dir=None,
    data_dir=None,
    seed=None,
    drop_remainder=False,
    *,
    download=True,
):
    """Loads MNIST as a batched, prefetched `tf.data.Dataset`.

    The data comes from TensorFlow Datasets (`tfds.load("mnist")`). Without
    `manual_dir`, TFDS downloads and prepares MNIST in `data_dir` on first
    use, as `tfds.load` does, and reads that copy afterwards; offline, the
    download fails (after TFDS's retries, minutes) with an `OSError` that
    says how to pass `manual_dir`, and `download=False` forbids it. With
    `manual_dir`, nothing is downloaded: the dataset is built offline from
    the four original `.gz` idx files found there (TFDS checks their
    checksums; their names and sizes are checked first, so that missing or
    wrong files fail at once) and stored in `data_dir` for later calls.

    For training, images are shuffled and augmented as in the paper: each
    image is shifted by a random integer number of pixels, up to 2 in each
    direction, with zero fill (zero-pad by 2, then a random 28x28 crop).
    Keras `fit` accepts the result on every backend.

    Sabour et al., 2017, [Dynamic Routing Between Capsules](
    https://arxiv.org/abs/1710.09829), section 5.

    Args:
        split: `"train"` or `"test"`. Defaults to `"train"`.
        batch_size: Positive int, examples per batch. Defaults to `128`.
        shuffle_buffer: Size of the shuffle buffer, `0` to keep the original
            order, or `None` for `10000` on the training split and no
            shuffling on the test split. Defaults to `None`.
        augment: Whether to apply the random shifts of up to 2 pixels. `None`
            means `True` for the training split and `False` for the test
            split. Defaults to `None`.
        manual_dir: Optional folder with the original
            `train-images-idx3-ubyte.gz`, `train-labels-idx1-ubyte.gz`,
            `t10k-images-idx3-ubyte.gz` and `t10k-labels-idx1-ubyte.gz`,
            used to build the dataset offline, without downloading, when it
            is not prepared yet. Defaults to `None`.
        data_dir: TFDS data directory holding (or receiving) the prepared
            dataset. `None` uses the TFDS default (`~/tensorflow_datasets`).
            Defaults to `None`.
        seed: Optional int making file order, shuffling and augmentation
            reproducible. Defaults to `None`.
        drop_remainder: Whether to drop the last batch when it is smaller
            than `batch_size`, giving a static batch dimension. Defaults to
            `False`.
        download: Keyword-only bool. Without `manual_dir`, whether TFDS
            may download MNIST when it is not prepared in `data_dir`;
            `False` raises a `FileNotFoundError` instead, at once. Ignored
            with `manual_dir`, which never downloads. Defaults to `True`.

    Returns:
        A `tf.data.Dataset` of `(images, labels)`: `images` float32 of shape
        `(batch, 28, 28, 1)` with values in `[0, 1]`, `labels` float32
        one-hot of shape `(batch, 10)`.

    Raises:
        ValueError: If an argument has an invalid value, or if the files in
            `manual_dir` are not the originals (their sizes differ).
        TypeError: If an argument has the wrong type.
        FileNotFoundError: If the dataset is not prepared in `data_dir` and
            `manual_dir` lacks some of the four files, or is `None` with
            `download=False`.
        OSError: If, without `manual_dir`, the download fails (offline,
            for example); the message says how to pass `manual_dir`.
        ImportError: If TensorFlow or TensorFlow Datasets is not installed.

    Example:

    ```python
    # Online: TFDS downloads MNIST once into ~/tensorflow_datasets.
    train = keras_capsules.datasets.mnist.load("train", batch_size=128, seed=0)
    # Offline: built from the four original .gz files, never downloading.
    test = keras_capsules.datasets.mnist.load("test", manual_dir="data/mnist")
    model.fit(train, epochs=10, shuffle=False)  # the dataset shuffles
    ```
    """
    fn = "mnist.load"
    check_option(split, "split", _common.SPLITS, owner=fn)
    check_positive_int(batch_size, "batch_size", owner=fn)
    check_int(shuffle_buffer, "shuffle_buffer", allow_none=True, owner=fn)
    check_bool(augment, "augment", allow_none=True, owner=fn)
    check_path(manual_dir, "manual_dir", owner=fn)
    check_path(data_dir, "data_dir", owner=fn)
    check_int(seed, "seed", allow_none=True, owner=fn)
    check_bool(drop_remainder, "drop_remainder", owner=fn)
    check_bool(download, "download", owner=fn)
    if manual_dir is not None:
        manual_dir = os.path.expanduser(os.fspath(manual_dir))
    training = split == "train"
    if augment is None:
        augment = training
    if shuffle_buffer is None:
        shuffle_buffer = _DEFAULT_SHUFFLE_BUFFER if training else 0

    tf = _common.import_tensorflow(fn)
    tfds = _common.import_tfds(fn)
    dataset = _load_tfds(
        tfds, split, manual_dir, data_dir, seed, shuffle_buffer > 1, download
    )
    # The decoded uint8 split is ~47 MB: caching it spares a PNG decode of
    # every image in every epoch.
    dataset = dataset.cache()
    if shuffle_buffer > 1:
        dataset = dataset.shuffle(
            shuffle_buffer, seed=seed, reshuffle_each_iteration=True
        )
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)

    def to_float(images, labels):
        images = tf.cast(images, "float32") / 255.0
        return images, tf.one_hot(labels, NUM_CLASSES, dtype="float32")

    if augment:
        # Shifting whole batches with gathers costs far less per image than
        # a per-example crop, which matters on few CPU cores.
        dataset = tf.data.Dataset.zip(
            (dataset, _common.element_seeds(tf, seed))
        ).map(
            lambda batch, seeds: to_float(
                _random_shift(tf, batch[0], seeds), batch[1]
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    else:
        dataset = dataset.map(to_float, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)


def _random_shift(tf, images, seed):
    """Shifts each image of a batch by up to `_MAX_SHIFT` pixels per axis."""
    height, width, _ = IMAGE_SHAPE
    padded = tf.pad(
        images,
        [[0, 0], [_MAX_SHIFT, _MAX_SHIFT], [_MAX_SHIFT, _MAX_SHIFT], [0, 0]],
    )
    offsets = tf.random.stateless_uniform(
        (tf.shape(images)[0], 2),
        seed=seed,
        minval=0,
        maxval=2 * _MAX_SHIFT + 1,
        dtype="int32",
    )
    rows = offsets[:, :1] + tf.range(height)[None, :]
    cols = offsets[:, 1:] + tf.range(width)[None, :]
    shifted = tf.gather(padded, rows, axis=1, batch_dims=1)
    return tf.gather(shifted, cols, axis=2, batch_dims=1)


def _load_tfds(
    tfds,
    split,
    manual_dir,
    data_dir,
    seed,
    shuffle_files,
    download,
    fn="mnist.load",
):
    read_config = tfds.ReadConfig(shuffle_seed=seed)
    kwargs = dict(
        split=split,
        as_supervised=True,
        data_dir=data_dir,
        shuffle_files=shuffle_files,
        read_config=read_config,
    )
    builder = tfds.builder("mnist", data_dir=data_dir)
    if manual_dir is not None and not builder.is_prepared():
        _common.check_original_files(fn, manual_dir, _ORIGINAL_SIZES)
        return _common.prepare_and_load(
            tfds, "mnist", builder, manual_dir, **kwargs
        )
    if manual_dir is None and download:
        _common.download_and_prepare(tfds, fn, builder, _HOW_TO_GET_FILES)
    try:
        return tfds.load("mnist", download=False, **kwargs)
    except AssertionError as error:
        # TFDS signals "not prepared" with an AssertionError; checking
        # `is_prepared()` up front instead would defeat
        # `tfds.testing.mock_data`, which mocks only the reading.
        if download:
            raise
        raise FileNotFoundError(
            f"`{fn}`: MNIST is not prepared in {builder.data_dir_root}, and "
            "download=False forbids fetching it. Pass `manual_dir`: "
            f"{_HOW_TO_GET_FILES} Or let TensorFlow Datasets download it "
            "with download=True. Received: manual_dir=None, download=False"
        ) from error
