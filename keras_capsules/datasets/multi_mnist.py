"""MultiMNIST: two overlapping MNIST digits of different classes.

The data set of section 6 of Sabour et al. (2017): "We generate the
MultiMNIST training and test dataset by overlaying a digit on top of another
digit from the same set (training or test) but different class. Each digit
is shifted up to 4 pixels in each direction resulting in a 36x36 image."

Each digit is placed in the `28 + 2 * pad` canvas (36x36 by default) with
its own random shift of up to `max_shift` pixels per axis, independently of
the other digit. The two are overlaid with the clipped sum
`min(a + b, 255)`, as the official generator does; `overlay="max"` takes the
pixel-wise maximum instead. The second digit is drawn uniformly among the
images of the split whose class differs from the first digit's.

`make_pairs` builds pairs in NumPy; `load` streams them as a `tf.data`
pipeline generated on the fly from MNIST. Both return `(x, y)` with `y` a
dict of the 2-hot labels, the label of each digit and the image of each
digit alone in the canvas (the reconstruction targets), the form that
`CapsNet(num_objects=2)` trains on.
"""

import numpy as np

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_image_values
from keras_capsules._validation import check_int
from keras_capsules._validation import check_option
from keras_capsules._validation import check_path
from keras_capsules._validation import check_positive_int
from keras_capsules.datasets import _common
from keras_capsules.datasets import mnist

NUM_CLASSES = 10
OVERLAYS = ("sum", "max")
# Sabour et al. (2017), section 6: shifts of up to 4 pixels, 36x36 canvas.
DEFAULT_MAX_SHIFT = 4
DEFAULT_PAD = 4
# MNIST digits are centred in a 20x20 box of their 28x28 image, so a digit
# shifted by up to `pad + 4` pixels keeps its ink inside the canvas.
_MARGIN = 4
_DEFAULT_NUM_PAIRS = {"train": 60000, "test": 10000}
_DEFAULT_TEST_SEED = 0


def make_pairs(
    images,
    labels,
    num_pairs,
    seed=0,
    max_shift=DEFAULT_MAX_SHIFT,
    pad=DEFAULT_PAD,
    overlay="sum",
):
    """Builds MultiMNIST pairs from single-digit images, in NumPy.

    For each pair, a first image is drawn uniformly from `images`, a second
    uniformly among the images of another class, each is shifted by an
    independent random integer of up to `max_shift` pixels per axis in a
    canvas padded by `pad` pixels on every side, and the two are overlaid.
    With the defaults (shifts of up to 4 pixels in a 36x36 canvas), the
    20x20 boxes of the two digits overlap by 72.6 % of their area on
    average.

    Sabour et al., 2017, [Dynamic Routing Between Capsules](
    https://arxiv.org/abs/1710.09829), section 6.

    Args:
        images: Array of single-digit images, shape `(N, H, W)` or
            `(N, H, W, 1)`, uint8 in `[0, 255]` or float in `[0, 1]`.
        labels: Class indices of shape `(N,)` or one-hot labels of shape
            `(N, 10)`.
        num_pairs: Positive int, the number of pairs to build.
        seed: Non-negative int seed of the draws; the same seed gives the
            same pairs. Defaults to `0`.
        max_shift: Int, the largest shift of a digit, in pixels, along each
            axis; at most `pad + 4`, so that the digit stays inside the
            canvas. Defaults to `4`.
        pad: Int, the padding on each side: the canvas is
            `(H + 2 * pad, W + 2 * pad)`. Defaults to `4`.
        overlay: `"sum"` for the clipped sum `min(a + b, 1)` of the two
            digits (the official generator's `min(a + b, 255)`), or `"max"`
            for their pixel-wise maximum. Defaults to `"sum"`.

    Returns:
        A tuple `(x, y)`: `x` float32 images of shape
        `(num_pairs, H + 2 * pad, W + 2 * pad, 1)` with values in `[0, 1]`,
        and `y` a dict of float32 arrays: `"labels"`, the 2-hot labels of
        shape `(num_pairs, 10)`; `"object_labels"`, the one-hot label of each
        digit, shape `(num_pairs, 2, 10)`; and `"objects"`, each digit alone
        in the canvas, shape `(num_pairs, 2, H + 2 * pad, W + 2 * pad, 1)`.

    Raises:
        ValueError: If an argument is out of range (`seed` included), if
            `images` holds NaN, an infinity or a value outside `[0, 255]`
            (integer dtypes) or `[0, 1]` (float dtypes), if the shapes of
            `images` and `labels` disagree, or if the labels hold fewer
            than two classes or other than 10 one-hot columns.

    Example:

    >>> import keras_capsules
    >>> from keras_capsules.datasets import mnist, multi_mnist
    >>> images, labels = mnist.load_sample("test")
    >>> x, y = multi_mnist.make_pairs(images, labels, num_pairs=4, seed=0)
    >>> x.shape, y["labels"].sum(axis=1).tolist()
    ((4, 36, 36, 1), [2.0, 2.0, 2.0, 2.0])
    """
    fn = "multi_mnist.make_pairs"
    num_pairs = check_positive_int(num_pairs, "num_pairs", owner=fn)
    seed = check_int(seed, "seed", owner=fn)
    max_shift, pad = _check_geometry(max_shift, pad, fn)
    check_option(overlay, "overlay", OVERLAYS, owner=fn)
    images, labels = _check_data(images, labels, fn)

    rng = np.random.default_rng(seed)
    order, starts, counts = _class_blocks(labels)
    first = rng.integers(0, len(labels), size=num_pairs)
    first_classes = labels[first]
    others = len(labels) - counts[first_classes]
    position = np.minimum(
        (rng.random(num_pairs) * others).astype("int64"), others - 1
    )
    # Positions past the first digit's class skip over its block.
    position = np.where(
        position < starts[first_classes],
        position,
        position + counts[first_classes],
    )
    second = order[position]
    shifts = rng.integers(-max_shift, max_shift + 1, size=(num_pairs, 2, 2))

    digits = np.stack(
        [
            _place(images[first], shifts[:, 0], max_shift, pad),
            _place(images[second], shifts[:, 1], max_shift, pad),
        ],
        axis=1,
    )
    if overlay == "sum":
        x = np.minimum(digits[:, 0] + digits[:, 1], np.float32(1.0))
    else:
        x = np.maximum(digits[:, 0], digits[:, 1])
    eye = np.eye(NUM_CLASSES, dtype="float32")
    digit_labels = np.stack([eye[labels[first]], eye[labels[second]]], axis=1)
    y = {
        "labels": digit_labels.sum(axis=1),
        "object_labels": digit_labels,
        "objects": digits[..., None],
    }
    return x[..., None], y


def load(
    split="train",
    batch_size=128,
    num_pairs=None,
    seed=None,
    max_shift=DEFAULT_MAX_SHIFT,
    pad=DEFAULT_PAD,
    overlay="sum",
    manual_dir=None,
    data_dir=None,
    drop_remainder=False,
    *,
    download=True,
):
    """Streams MultiMNIST pairs as a batched `tf.data.Dataset`.

    The pairs are generated on the fly from the MNIST split (read by
    `mnist.load_arrays`, from the original files in `manual_dir` or from
    TensorFlow Datasets, which downloads MNIST on first use), with the
    procedure of `make_pairs` written in TensorFlow ops, batch by batch.
    The draws are deterministic for a fixed `seed` but are not the draws
    of `make_pairs` with the same seed. The training split draws new pairs
    every epoch; the test split draws the same pairs at every iteration,
    so that evaluations compare. Keras `fit` accepts the result on every
    backend.

    Args:
        split: `"train"` or `"test"`. Defaults to `"train"`.
        batch_size: Positive int, pairs per batch. Defaults to `128`.
        num_pairs: Positive int, the pairs per epoch, or `None` for 60,000
            on the training split and 10,000 on the test split. Defaults
            to `None`.
        seed: Optional int making the pairs reproducible. `None` draws
            different training pairs at each call and uses seed 0 for the
            test split. Defaults to `None`.
        max_shift: Int, the largest shift of a digit per axis, at most
            `pad + 4`. Defaults to `4`.
        pad: Int, the padding on each side of the 28x28 digits. Defaults
            to `4` (36x36 pairs).
        overlay: `"sum"` (clipped sum) or `"max"`, as in `make_pairs`.
            Defaults to `"sum"`.
        manual_dir: Optional folder with the original MNIST idx files.
            Defaults to `None`.
        data_dir: TFDS data directory holding (or receiving) the prepared
            `mnist` dataset, used when `manual_dir` is `None`. Defaults to
            `None`.
        drop_remainder: Whether to drop the last batch when it is smaller
            than `batch_size`. Defaults to `False`.
        download: Keyword-only bool. Without `manual_dir`, whether TFDS
            may download MNIST when it is not prepared in `data_dir`, as
            in `mnist.load_arrays`. Defaults to `True`.

    Returns:
        A `tf.data.Dataset` of `(x, y)` batches with the shapes and dtypes
        of `make_pairs`, `batch_size` pairs at a time.

    Raises:
        ValueError: If an argument has an invalid value.
        TypeError: If an argument has the wrong type.
        FileNotFoundError: If MNIST cannot be found without downloading
            (see `mnist.load_arrays`).
        OSError: If, without `manual_dir`, the download of MNIST fails
            (offline, for example); the message says how to pass
            `manual_dir`.
        ImportError: If TensorFlow is not installed.

    Example:

    ```python
    train = keras_capsules.datasets.multi_mnist.load(
        "train", batch_size=128, manual_dir="data/mnist", seed=0
    )
    model = keras_capsules.models.CapsNet(input_shape=(36, 36, 1),
                                          num_objects=2)
    model.compile()
    model.fit(train, epochs=1)
    ```
    """
    fn = "multi_mnist.load"
    check_option(split, "split", _common.SPLITS, owner=fn)
    batch_size = check_positive_int(batch_size, "batch_size", owner=fn)
    if num_pairs is None:
        num_pairs = _DEFAULT_NUM_PAIRS[split]
    num_pairs = check_positive_int(num_pairs, "num_pairs", owner=fn)
    seed = check_int(seed, "seed", allow_none=True, owner=fn)
    max_shift, pad = _check_geometry(max_shift, pad, fn)
    check_option(overlay, "overlay", OVERLAYS, owner=fn)
    check_path(manual_dir, "manual_dir", owner=fn)
    check_path(data_dir, "data_dir", owner=fn)
    check_bool(drop_remainder, "drop_remainder", owner=fn)
    check_bool(download, "download", owner=fn)
    tf = _common.import_tensorflow(fn)
    images, labels = mnist.load_arrays(
        split, manual_dir=manual_dir, data_dir=data_dir, download=download
    )
    training = split == "train"
    if seed is None and not training:
        seed = _DEFAULT_TEST_SEED
    order, starts, counts = _class_blocks(labels.astype("int64"))
    generate = _tf_generator(
        tf, images, labels, order, starts, counts, max_shift, pad, overlay
    )
    seeds = tf.data.Dataset.random(
        seed=seed, rerandomize_each_iteration=training
    ).batch(2, drop_remainder=True)
    dataset = tf.data.Dataset.range(num_pairs).batch(
        batch_size, drop_remainder=drop_remainder
    )
    dataset = tf.data.Dataset.zip((dataset, seeds)).map(
        generate, num_parallel_calls=tf.data.AUTOTUNE
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def _tf_generator(
    tf, images, labels, order, starts, counts, max_shift, pad, overlay
):
    """Returns the `tf.data` map function that makes one batch of pairs."""
    images = tf.constant(images)
    labels = tf.constant(labels.astype("int32"))
    order = tf.constant(order.astype("int32"))
    starts = tf.constant(starts.astype("int32"))
    counts = tf.constant(counts.astype("int32"))
    num_images = int(images.shape[0])
    height, width = int(images.shape[1]), int(images.shape[2])
    border = pad + max_shift
    padded = tf.pad(images, [[0, 0], [border, border], [border, border]])
    canvas = (height + 2 * pad, width + 2 * pad)

    def place(indices, shifts):
        # Canvas row r holds row r + max_shift - shift of the padded image.
        rows = (max_shift - shifts[:, :1]) + tf.range(canvas[0])[None, :]
        cols = (max_shift - shifts[:, 1:]) + tf.range(canvas[1])[None, :]
        placed = tf.gather(tf.gather(padded, indices), rows, batch_dims=1)
        placed = tf.gather(placed, cols, axis=2, batch_dims=1)
        return tf.cast(placed, "float32") / 255.0

    def generate(pair_ids, seed):
        size = tf.shape(pair_ids)[0]
        seeds = tf.random.experimental.stateless_split(
            tf.cast(seed, "int64"), 3
        )
        first = tf.random.stateless_uniform(
            (size,), seeds[0], 0, num_images, dtype="int32"
        )
        first_classes = tf.gather(labels, first)
        others = num_images - tf.gather(counts, first_classes)
        draw = tf.random.stateless_uniform((size,), seeds[1])
        position = tf.minimum(
            tf.cast(draw * tf.cast(others, "float32"), "int32"), others - 1
        )
        start = tf.gather(starts, first_classes)
        position = tf.where(
            position < start,
            position,
            position + tf.gather(counts, first_classes),
        )
        second = tf.gather(order, position)
        shifts = tf.random.stateless_uniform(
            (size, 2, 2), seeds[2], -max_shift, max_shift + 1, dtype="int32"
        )
        digits = tf.stack(
            [place(first, shifts[:, 0]), place(second, shifts[:, 1])], axis=1
        )
        if overlay == "sum":
            x = tf.minimum(digits[:, 0] + digits[:, 1], 1.0)
        else:
            x = tf.maximum(digits[:, 0], digits[:, 1])
        digit_labels = tf.one_hot(
            tf.stack([first_classes, tf.gather(labels, second)], axis=1),
            NUM_CLASSES,
            dtype="float32",
        )
        y = {
            "labels": tf.reduce_sum(digit_labels, axis=1),
            "object_labels": digit_labels,
            "objects": digits[..., None],
        }
        return x[..., None], y

    return generate


def _place(images, shifts, max_shift, pad):
    """Places each image in the padded canvas, moved by `shifts` (n, 2)."""
    border = pad + max_shift
    padded = np.pad(images, [(0, 0), (border, border), (border, border)])
    height = images.shape[1] + 2 * pad
    width = images.shape[2] + 2 * pad
    rows = (max_shift - shifts[:, :1]) + np.arange(height)[None, :]
    cols = (max_shift - shifts[:, 1:]) + np.arange(width)[None, :]
    placed = np.take_along_axis(padded, rows[:, :, None], axis=1)
    return np.take_along_axis(placed, cols[:, None, :], axis=2)


def _class_blocks(labels):
    """Returns the class-sorted order of `labels`, each class's block start
    in that order, and its size."""
    order = np.argsort(labels, kind="stable")
    counts = np.bincount(labels, minlength=NUM_CLASSES)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return order, starts, counts


def _check_geometry(max_shift, pad, fn):
    pad = check_int(pad, "pad", owner=fn)
    max_shift = check_int(max_shift, "max_shift", owner=fn)
    if max_shift > pad + _MARGIN:
        raise ValueError(
            f"`{fn}`: argument `max_shift` must be at most pad + {_MARGIN} = "
            f"{pad + _MARGIN}, so that a shifted digit stays inside the "
            f"canvas. Received: max_shift={max_shift}"
        )
    return max_shift, pad


def _check_data(images, labels, fn):
    images = np.asarray(images)
    labels = np.asarray(labels)
    if images.ndim == 4 and images.shape[-1] == 1:
        images = images[..., 0]
    if images.ndim != 3:
        raise ValueError(
            f"`{fn}`: argument `images` must have shape (N, H, W) or "
            f"(N, H, W, 1). Received: images.shape={images.shape}"
        )
    # The overlay clips at 1, so pixels of another scale would saturate
    # into plausible-looking pairs of the wrong data.
    if np.issubdtype(images.dtype, np.integer):
        check_image_values(images, "images", owner=fn, value_range=(0, 255))
        images = images.astype("float32") / np.float32(255.0)
    else:
        check_image_values(images, "images", owner=fn, value_range=(0, 1))
        images = images.astype("float32")
    if labels.ndim == 2 and labels.shape[-1] == NUM_CLASSES:
        labels = labels.argmax(axis=-1)
    if (
        labels.ndim != 1
        or len(labels) != len(images)
        or not np.issubdtype(labels.dtype, np.integer)
    ):
        raise ValueError(
            f"`{fn}`: argument `labels` must hold one class index (shape "
            f"(N,)) or one one-hot row (shape (N, {NUM_CLASSES})) per image "
            f"of `images` ({len(images)} images). "
            f"Received: labels.shape={labels.shape}"
        )
    labels = labels.astype("int64")
    if labels.min() < 0 or labels.max() >= NUM_CLASSES:
        raise ValueError(
            f"`{fn}`: argument `labels` must hold classes 0 to "
            f"{NUM_CLASSES - 1}. Received: labels.min()={labels.min()}, "
            f"labels.max()={labels.max()}"
        )
    if len(np.unique(labels)) < 2:
        raise ValueError(
            f"`{fn}`: argument `labels` must hold at least two classes, as "
            "the two digits of a pair differ in class. Received: "
            f"np.unique(labels)={np.unique(labels)}"
        )
    return images, labels
