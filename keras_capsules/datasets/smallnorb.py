"""smallNORB input pipelines for matrix capsules with EM routing.

`load` builds the `tf.data` pipeline of Hinton et al. (2018) with the
preprocessing of the authors' released code: both images of the stereo pair
as two channels, downsampled from 96x96 to 48x48; for training, random
brightness and contrast, a random 32x32 crop and per-image standardisation;
for testing, the central 32x32 crop (or, optionally, several crops per
image). The data comes from TensorFlow Datasets (downloaded on first use
like `tfds.load("smallnorb")`, or built offline from the original files) or,
without checksums or network, straight from the original NORB `.mat` files
through `read_norb`.

smallNORB is by Yann LeCun, Fu Jie Huang and Leon Bottou (CVPR 2004),
<https://cs.nyu.edu/~ylclab/data/norb-v1.0-small/>.
"""

import logging
import os
import struct

import numpy as np

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_int
from keras_capsules._validation import check_option
from keras_capsules._validation import check_path
from keras_capsules._validation import check_positive_int
from keras_capsules.datasets import _common

NUM_CLASSES = 5
CLASS_NAMES = (
    "four-legged animals",
    "human figures",
    "airplanes",
    "trucks",
    "cars",
)
IMAGE_SIZE = 96
NUM_CHANNELS = 2

# Official preprocessing (capsule_em/norb/norb_record.py): distortions act on
# raw 0..255 intensities before per-image standardisation.
_MAX_BRIGHTNESS_DELTA = 63.0
_CONTRAST_RANGE = (0.2, 1.8)
# Evaluation crops of the official code: the centre crop plus crops whose
# centres move by (+-k, +-k) pixels for k = 1, 2, 3.
_MULTI_CROP_OFFSETS = ((0, 0),) + tuple(
    (sign_y * k, sign_x * k)
    for k in (1, 2, 3)
    for sign_y, sign_x in ((1, 1), (1, -1), (-1, 1), (-1, -1))
)
NUM_MULTI_CROPS = len(_MULTI_CROP_OFFSETS)
_DEFAULT_SHUFFLE_BUFFER = 10000
_SOURCES = ("auto", "tfds", "files")

_PREFIXES = {
    "train": "smallnorb-5x46789x9x18x6x2x96x96-training",
    "test": "smallnorb-5x01235x9x18x6x2x96x96-testing",
}
# Sizes in bytes of the original files, as registered by TensorFlow Datasets.
_ORIGINAL_SIZES = {
    f"{_PREFIXES['train']}-cat.mat.gz": 348,
    f"{_PREFIXES['train']}-dat.mat.gz": 131896188,
    f"{_PREFIXES['train']}-info.mat.gz": 71052,
    f"{_PREFIXES['test']}-cat.mat.gz": 347,
    f"{_PREFIXES['test']}-dat.mat.gz": 130799817,
    f"{_PREFIXES['test']}-info.mat.gz": 10428,
}

# NORB binary matrix magic numbers (little-endian int32) and element types.
_NORB_DTYPES = {
    0x1E3D4C51: np.dtype("<f4"),
    0x1E3D4C53: np.dtype("<f8"),
    0x1E3D4C54: np.dtype("<i4"),
    0x1E3D4C55: np.dtype("u1"),
    0x1E3D4C56: np.dtype("<i2"),
}

_HOW_TO_GET_FILES = (
    "a folder with the six original smallNORB files "
    f"{', '.join(_ORIGINAL_SIZES)}, from "
    "https://cs.nyu.edu/~ylclab/data/norb-v1.0-small/ (the source that "
    "TensorFlow Datasets downloads from)."
)

_logger = logging.getLogger(__name__)


def read_norb(path):
    """Reads a file in the NORB binary matrix format into a NumPy array.

    The format (the `.mat` files of NORB and smallNORB, not MATLAB files) is
    little-endian: an int32 magic number giving the element type
    (`0x1E3D4C55` uint8, `0x1E3D4C54` int32, `0x1E3D4C56` int16,
    `0x1E3D4C51` float32, `0x1E3D4C53` float64), an int32 number of
    dimensions `ndim`, `max(ndim, 3)` int32 dimensions (the unused ones are
    1), then the data in C order. Gzipped files (detected from their content)
    are decompressed on the fly.

    Args:
        path: Path of a NORB file, gzipped or not, for example
            `"smallnorb-5x46789x9x18x6x2x96x96-training-dat.mat.gz"`.

    Returns:
        A NumPy array in native byte order: `(N, 2, 96, 96)` uint8 for the
        `dat` files, `(N,)` int32 for `cat`, `(N, 4)` int32 for `info`.

    Raises:
        ValueError: If the file is not a valid NORB file.

    Example:

    ```python
    labels = keras_capsules.datasets.smallnorb.read_norb(
        "smallnorb-5x01235x9x18x6x2x96x96-testing-cat.mat.gz"
    )  # (24300,) int32
    ```
    """
    data = _common.read_maybe_gzipped(path)
    if len(data) < 8:
        raise ValueError(
            "`read_norb`: the file is too short to be a NORB file. "
            f"Received: path={path}"
        )
    magic, ndim = struct.unpack("<ii", data[:8])
    if magic not in _NORB_DTYPES:
        raise ValueError(
            f"`read_norb`: unknown magic number {magic:#x}; expected one of "
            f"{', '.join(hex(m) for m in _NORB_DTYPES)}. "
            f"Received: path={path}"
        )
    if ndim < 0:
        raise ValueError(
            f"`read_norb`: invalid number of dimensions {ndim}. "
            f"Received: path={path}"
        )
    header = 8 + 4 * max(ndim, 3)
    if len(data) < header:
        raise ValueError(
            "`read_norb`: the file is truncated inside its header. "
            f"Received: path={path}"
        )
    shape = struct.unpack(f"<{ndim}i", data[8 : 8 + 4 * ndim])
    dtype = _NORB_DTYPES[magic]
    count = int(np.prod(shape, dtype=np.int64))
    if len(data) - header != count * dtype.itemsize:
        raise ValueError(
            f"`read_norb`: the header announces shape {shape} "
            f"({count * dtype.itemsize} bytes of data) but the file holds "
            f"{len(data) - header} bytes. Received: path={path}"
        )
    array = np.frombuffer(data, dtype=dtype, count=count, offset=header)
    return array.reshape(shape).astype(dtype.newbyteorder("="))


def load(
    split="train",
    batch_size=64,
    shuffle_buffer=None,
    manual_dir=None,
    data_dir=None,
    source="auto",
    image_size=48,
    crop_size=32,
    multi_crop=False,
    seed=None,
    *,
    download=True,
):
    """Loads smallNORB as a batched, prefetched `tf.data.Dataset`.

    Each example is the stereo pair of one object view, stacked as two
    channels and resized from 96x96 to `image_size` (bilinear). Then, as in
    the released code of Hinton et al. (2018):

    - training split: random brightness (delta up to 63 on the 0-255 scale),
      random contrast (factor in [0.2, 1.8]), a random
      `crop_size`x`crop_size` crop, and per-image standardisation;
    - test split: the central crop and per-image standardisation, or with
      `multi_crop=True` 13 crops per image: the central one plus the crops
      whose centres are moved by `(+-k, +-k)` pixels for `k` in 1, 2, 3,
      each standardised.

    Data sources:

    - `"tfds"`: `tfds.load("smallnorb")`. With `manual_dir`, which must
      hold the six original `smallnorb-*-{dat,cat,info}.mat.gz` files,
      TFDS builds the dataset offline after checking their sizes and
      checksums, without downloading. Without `manual_dir`, TFDS downloads
      and prepares it in `data_dir` on first use (about 260 MB), as
      `tfds.load` does; offline, the download fails (after TFDS's retries,
      minutes) with an `OSError` that says how to pass `manual_dir`, and
      `download=False` forbids it. Either way the prepared copy in
      `data_dir` is read by later calls.
    - `"files"`: reads the split's original `dat` and `cat` files (`.mat.gz`
      or decompressed `.mat`) from `manual_dir` with `read_norb`, with no
      checksum check and no TFDS.
    - `"auto"`: `"tfds"` when TFDS is installed and either `manual_dir` is
      `None`, the dataset is prepared or TFDS can build it from
      `manual_dir`; otherwise `"files"`.

    Hinton et al., 2018, [Matrix capsules with EM routing](
    https://openreview.net/forum?id=HJWLfGWRb), section 5.

    Args:
        split: `"train"` or `"test"`. Defaults to `"train"`.
        batch_size: Positive int, examples per batch. Defaults to `64`.
        shuffle_buffer: Size of the shuffle buffer, `0` to keep the stored
            order, or `None` for `10000` on the training split and no
            shuffling on the test split. Defaults to `None`.
        manual_dir: Optional folder with the original smallNORB files.
            Defaults to `None`.
        data_dir: TFDS data directory holding (or receiving) the prepared
            dataset, unused by `"files"`. Defaults to `None`, the TFDS one.
        source: `"auto"`, `"tfds"` or `"files"`, see above. Defaults to
            `"auto"`.
        image_size: Int, side of the images after resizing, at most 96.
            Defaults to `48`.
        crop_size: Int, side of the crops fed to the model, at most
            `image_size`. Defaults to `32`.
        multi_crop: Whether to yield 13 crops per test image instead of the
            central one. Only for the test split; needs
            `image_size - crop_size >= 6`. Defaults to `False`.
        seed: Optional int making shuffling and distortions reproducible.
            Defaults to `None`.
        download: Keyword-only bool. Without `manual_dir`, whether TFDS
            may download smallNORB when it is not prepared in `data_dir`;
            `False` raises a `FileNotFoundError` instead, at once. Ignored
            with `manual_dir`, which never downloads. Defaults to `True`.

    Returns:
        A `tf.data.Dataset` of `(images, labels)` with float32 one-hot
        `labels` of shape `(batch, 5)` and float32 `images` of shape
        `(batch, crop_size, crop_size, 2)`, or with `multi_crop=True`
        `(batch, 13, crop_size, crop_size, 2)`, the central crop first. To
        evaluate with several crops, average the predictions over axis 1:
        `model.predict(ops.reshape(images, (-1, crop_size, crop_size, 2)))`
        reshaped to `(batch, 13, 5)`.

    Raises:
        ValueError: If an argument has an invalid value, or `source="files"`
            comes without `manual_dir`.
        TypeError: If an argument has the wrong type.
        FileNotFoundError: If no data can be had from the chosen source
            without downloading: `manual_dir` lacks files, or is `None`
            with `download=False` and the dataset is not prepared.
        OSError: If, without `manual_dir`, the download fails (offline,
            for example); the message says how to pass `manual_dir`.
        ImportError: If TensorFlow (or, for `source="tfds"` or without
            `manual_dir`, TensorFlow Datasets) is not installed.

    Example:

    ```python
    train = keras_capsules.datasets.smallnorb.load(
        "train", batch_size=64, manual_dir="data/smallnorb", seed=0
    )
    model.fit(train, epochs=50, shuffle=False)  # the dataset shuffles
    ```
    """
    fn = "smallnorb.load"
    check_option(split, "split", _common.SPLITS, owner=fn)
    check_positive_int(batch_size, "batch_size", owner=fn)
    check_int(shuffle_buffer, "shuffle_buffer", allow_none=True, owner=fn)
    check_path(manual_dir, "manual_dir", owner=fn)
    check_path(data_dir, "data_dir", owner=fn)
    if source not in _SOURCES:
        raise ValueError(
            f"`{fn}`: argument `source` must be one of {_SOURCES}. "
            f"Received: source={source}"
        )
    check_positive_int(image_size, "image_size", owner=fn)
    if image_size > IMAGE_SIZE:
        raise ValueError(
            f"`{fn}`: argument `image_size` must be at most {IMAGE_SIZE}, "
            f"the size of the smallNORB images. Received: "
            f"image_size={image_size}"
        )
    check_positive_int(crop_size, "crop_size", owner=fn)
    if crop_size > image_size:
        raise ValueError(
            f"`{fn}`: argument `crop_size` must be at most "
            f"image_size={image_size}. Received: crop_size={crop_size}"
        )
    check_bool(multi_crop, "multi_crop", owner=fn)
    if multi_crop and split != "test":
        raise ValueError(
            f"`{fn}`: `multi_crop=True` is an evaluation scheme and needs "
            f"split='test'. Received: split={split}"
        )
    max_offset = max(abs(o) for offset in _MULTI_CROP_OFFSETS for o in offset)
    if multi_crop and image_size - crop_size < 2 * max_offset:
        raise ValueError(
            f"`{fn}`: `multi_crop=True` moves crops by up to {max_offset} "
            f"pixels, so it needs image_size - crop_size >= "
            f"{2 * max_offset}. Received: crop_size={crop_size}"
        )
    check_int(seed, "seed", allow_none=True, owner=fn)
    check_bool(download, "download", owner=fn)
    if source == "files" and manual_dir is None:
        raise ValueError(
            f"`{fn}`: source='files' reads the original files from "
            "`manual_dir`, which must be given. Received: manual_dir=None"
        )
    if manual_dir is not None:
        manual_dir = os.path.expanduser(os.fspath(manual_dir))
    training = split == "train"
    if shuffle_buffer is None:
        shuffle_buffer = _DEFAULT_SHUFFLE_BUFFER if training else 0

    tf = _common.import_tensorflow(fn)
    dataset = _load_raw(
        tf, split, manual_dir, data_dir, source, seed, shuffle_buffer, download
    )

    def resize(image, label):
        image = tf.cast(image, "float32")
        if image_size != IMAGE_SIZE:
            image = tf.image.resize(
                image, (image_size, image_size), method="bilinear"
            )
        return image, tf.one_hot(label, NUM_CLASSES, dtype="float32")

    dataset = dataset.map(resize, num_parallel_calls=tf.data.AUTOTUNE)
    if training:
        dataset = tf.data.Dataset.zip(
            (dataset, _common.element_seeds(tf, seed))
        ).map(
            lambda example, seeds: (
                _distort(tf, example[0], seeds, crop_size),
                example[1],
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    elif multi_crop:
        dataset = dataset.map(
            lambda image, label: (
                _multi_crop(tf, image, image_size, crop_size),
                label,
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    else:
        dataset = dataset.map(
            lambda image, label: (
                _central_crop(tf, image, image_size, crop_size),
                label,
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def _distort(tf, image, seed, crop_size):
    seeds = tf.random.experimental.stateless_split(seed, num=3)
    # Kept for fidelity to the released code, although the per-image
    # standardisation below cancels a uniform brightness shift.
    image = tf.image.stateless_random_brightness(
        image, _MAX_BRIGHTNESS_DELTA, seed=seeds[0]
    )
    image = tf.image.stateless_random_contrast(
        image, *_CONTRAST_RANGE, seed=seeds[1]
    )
    image = tf.image.stateless_random_crop(
        image, (crop_size, crop_size, NUM_CHANNELS), seed=seeds[2]
    )
    return tf.image.per_image_standardization(image)


def _central_crop(tf, image, image_size, crop_size):
    start = (image_size - crop_size) // 2
    image = image[start : start + crop_size, start : start + crop_size]
    return tf.image.per_image_standardization(image)


def _multi_crop(tf, image, image_size, crop_size):
    start = (image_size - crop_size) // 2
    crops = [
        image[
            start + dy : start + dy + crop_size,
            start + dx : start + dx + crop_size,
        ]
        for dy, dx in _MULTI_CROP_OFFSETS
    ]
    return tf.image.per_image_standardization(tf.stack(crops))


def _find_file(manual_dir, split, kind):
    """Returns the path of the `.mat.gz` or `.mat` file, or None."""
    for suffix in (".mat.gz", ".mat"):
        path = os.path.join(manual_dir, f"{_PREFIXES[split]}-{kind}{suffix}")
        if os.path.isfile(path):
            return path
    return None


def _load_raw(
    tf, split, manual_dir, data_dir, source, seed, shuffle_buffer, download
):
    """Returns a shuffled dataset of `(uint8 (96, 96, 2), int label)`."""
    fn = "smallnorb.load"
    if source == "files":
        return _load_files(tf, split, manual_dir, seed, shuffle_buffer)
    if source == "auto":
        try:
            tfds = _common.import_tfds(fn)
        except ImportError:
            if manual_dir is None:
                raise
            return _load_files(tf, split, manual_dir, seed, shuffle_buffer)
    else:
        tfds = _common.import_tfds(fn)
    args = (
        tf,
        tfds,
        split,
        manual_dir,
        data_dir,
        seed,
        shuffle_buffer,
        download,
    )
    if source == "tfds" or manual_dir is None:
        return _load_tfds(*args)
    builder = tfds.builder("smallnorb", data_dir=data_dir)
    # TFDS rejects any bytes but the originals; comparing sizes first sends
    # other files in the same format (subsets, re-compressions) to the direct
    # reader instead of into a failing TFDS build.
    originals = all(
        _common.file_size(os.path.join(manual_dir, name)) == size
        for name, size in _ORIGINAL_SIZES.items()
    )
    if builder.is_prepared() or originals:
        return _load_tfds(*args)
    _logger.info(
        "smallnorb is not prepared in %s and %s lacks the original files "
        "TFDS needs; reading the files directly.",
        builder.data_dir_root,
        manual_dir,
    )
    return _load_files(tf, split, manual_dir, seed, shuffle_buffer)


def _load_tfds(
    tf, tfds, split, manual_dir, data_dir, seed, shuffle_buffer, download
):
    fn = "smallnorb.load"
    kwargs = dict(
        split=split,
        data_dir=data_dir,
        shuffle_files=shuffle_buffer > 1,
        read_config=tfds.ReadConfig(shuffle_seed=seed),
    )
    builder = tfds.builder("smallnorb", data_dir=data_dir)
    if manual_dir is not None and not builder.is_prepared():
        _common.check_original_files(
            fn,
            manual_dir,
            _ORIGINAL_SIZES,
            hint=" Use source='files' to read other files in the NORB "
            "format directly.",
        )
        dataset = _common.prepare_and_load(
            tfds, "smallnorb", builder, manual_dir, **kwargs
        )
    else:
        if manual_dir is None and download:
            _common.download_and_prepare(tfds, fn, builder, _HOW_TO_GET_FILES)
        try:
            dataset = tfds.load("smallnorb", download=False, **kwargs)
        except AssertionError as error:
            # TFDS signals "not prepared" with an AssertionError; checking
            # `is_prepared()` up front instead would defeat
            # `tfds.testing.mock_data`, which mocks only the reading.
            if download:
                raise
            raise FileNotFoundError(
                f"`{fn}`: smallnorb is not prepared in "
                f"{builder.data_dir_root}, and download=False forbids "
                f"fetching it. Pass `manual_dir`: {_HOW_TO_GET_FILES} Or "
                "let TensorFlow Datasets download it with download=True. "
                "Received: manual_dir=None, download=False"
            ) from error
    if shuffle_buffer > 1:
        dataset = dataset.shuffle(
            shuffle_buffer, seed=seed, reshuffle_each_iteration=True
        )
    return dataset.map(
        lambda example: (
            tf.concat([example["image"], example["image2"]], axis=-1),
            example["label_category"],
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def _load_files(tf, split, manual_dir, seed, shuffle_buffer):
    fn = "smallnorb.load"
    paths = {
        kind: _find_file(manual_dir, split, kind) for kind in ("dat", "cat")
    }
    missing = [
        f"{_PREFIXES[split]}-{kind}.mat[.gz]"
        for kind, path in paths.items()
        if path is None
    ]
    if missing:
        raise FileNotFoundError(
            f"`{fn}`: the {split} split needs {' and '.join(missing)} in "
            f"`manual_dir`. Received: manual_dir={manual_dir}"
        )
    images = read_norb(paths["dat"])
    labels = read_norb(paths["cat"])
    if (
        images.ndim != 4
        or images.shape[1:] != (NUM_CHANNELS, IMAGE_SIZE, IMAGE_SIZE)
        or labels.shape != images.shape[:1]
    ):
        raise ValueError(
            f"`{fn}`: expected images of shape (N, 2, 96, 96) and labels of "
            f"shape (N,), got {images.shape} and {labels.shape}. "
            f"Received: manual_dir={manual_dir}"
        )
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise ValueError(
            f"`{fn}`: category labels must lie in [0, {NUM_CLASSES}), got "
            f"values in [{labels.min()}, {labels.max()}]. "
            f"Received: manual_dir={manual_dir}"
        )
    # Shuffling indices and transposing per example inside the pipeline
    # avoid buffering or copying the whole split (~450 MB of training
    # images).
    images = tf.constant(images)
    labels = tf.constant(labels.astype(np.int64))
    indices = tf.data.Dataset.range(len(labels))
    if shuffle_buffer > 1:
        indices = indices.shuffle(
            shuffle_buffer, seed=seed, reshuffle_each_iteration=True
        )
    return indices.map(
        lambda index: (
            tf.transpose(tf.gather(images, index), (1, 2, 0)),
            tf.gather(labels, index),
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
