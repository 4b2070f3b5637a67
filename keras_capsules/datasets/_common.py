"""Private helpers shared by the dataset pipelines.

TensorFlow and TensorFlow Datasets are optional extras of keras_capsules, so
they are imported here lazily, inside functions, and never at module level.
"""

import gzip
import os

_INSTALL_HINT = (
    "Install the optional dataset dependencies with "
    "`pip install keras-capsules[datasets]` (tensorflow, "
    "tensorflow-datasets and importlib_resources)."
)


SPLITS = ("train", "test")


def import_tensorflow(function_name):
    """Returns the `tensorflow` module or raises an actionable ImportError."""
    try:
        import tensorflow as tf
    except ImportError as error:
        raise ImportError(
            f"`{function_name}` builds a `tf.data.Dataset` and needs "
            f"TensorFlow, which could not be imported ({error}). "
            f"{_INSTALL_HINT}"
        ) from error
    return tf


def import_tfds(function_name):
    """Returns `tensorflow_datasets` or raises an actionable ImportError."""
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:
        # TFDS 4.9.x imports importlib_resources on every Python version but
        # declares it only for Python < 3.9, so a missing backport surfaces
        # here as a ModuleNotFoundError from inside TFDS.
        raise ImportError(
            f"`{function_name}` reads data through TensorFlow Datasets, "
            f"which could not be imported ({error}). {_INSTALL_HINT}"
        ) from error
    return tfds


def read_maybe_gzipped(path):
    """Reads a whole file, decompressing it when it is gzipped.

    Compression is detected from the gzip magic bytes, not the file name, so
    `.gz` files that were decompressed in place keep working.
    """
    with open(os.fspath(path), "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data


def file_size(path):
    """Returns the size of `path` in bytes, or None if it is not a file."""
    try:
        return os.path.getsize(path) if os.path.isfile(path) else None
    except OSError:
        return None


def check_original_files(function_name, manual_dir, sizes, hint=""):
    """Checks that `manual_dir` holds the original files TFDS will accept.

    TFDS verifies sizes and checksums of the files in `manual_dir`; a missing
    file sends it to the network, where it retries for minutes. Checking
    names and sizes here turns both cases into an immediate error.

    Args:
        function_name: Name of the public function, for the message.
        manual_dir: The folder to check.
        sizes: Dict mapping each expected file name to its size in bytes.
        hint: Optional sentence appended to the message.

    Raises:
        FileNotFoundError: If a file is missing.
        ValueError: If a file has a size other than the original's.
    """
    missing = []
    wrong = []
    for name, size in sizes.items():
        actual = file_size(os.path.join(manual_dir, name))
        if actual is None:
            missing.append(name)
        elif actual != size:
            wrong.append(f"{name} ({actual} bytes, expected {size})")
    if missing:
        raise FileNotFoundError(
            f"`{function_name}`: `manual_dir` lacks {', '.join(missing)}. "
            f"TensorFlow Datasets builds the dataset offline from the "
            f"original files {', '.join(sizes)}, all in `manual_dir`.{hint} "
            f"Received: manual_dir={manual_dir}"
        )
    if wrong:
        raise ValueError(
            f"`{function_name}`: files in `manual_dir` differ from the "
            f"originals that TensorFlow Datasets checks: {', '.join(wrong)}."
            f"{hint} Received: manual_dir={manual_dir}"
        )


def prepare_and_load(tfds, name, builder, manual_dir, **load_kwargs):
    """Builds dataset `name` offline from `manual_dir`, then loads it.

    Never downloads: TFDS takes the original files from `manual_dir`
    (check them first with `check_original_files`) and stores the prepared
    dataset in the builder's data directory for later calls.
    """
    config = tfds.download.DownloadConfig(
        manual_dir=os.fspath(manual_dir),
        # TFDS reuses extractions by file name, so every dataset gets its
        # own extraction folder.
        extract_dir=os.path.join(
            builder.data_dir_root, "downloads", "extracted", name
        ),
        try_download_gcs=False,
    )
    return tfds.load(
        name,
        download=True,
        download_and_prepare_kwargs={"download_config": config},
        **load_kwargs,
    )


def download_and_prepare(tfds, function_name, builder, how_to_get_files):
    """Downloads and prepares `builder`'s dataset, as `tfds.load` does.

    A prepared dataset is reused. TFDS fetches the files into the
    builder's data directory (`~/tensorflow_datasets` unless `data_dir`
    says otherwise) and prepares them there for later calls.

    Args:
        tfds: The `tensorflow_datasets` module.
        function_name: Name of the public function, for the message.
        builder: The `tfds` builder of the dataset.
        how_to_get_files: Sentence saying which files `manual_dir` must
            hold and where to get them, for the message.

    Raises:
        OSError: If the download or the preparation fails, for example
            offline, with the original error as its cause.
    """
    if builder.is_prepared():
        return
    try:
        builder.download_and_prepare()
    except (OSError, tfds.download.DownloadError) as error:
        # Offline, TFDS raises a `requests` ConnectionError (an OSError)
        # after minutes of retries.
        raise OSError(
            f"`{function_name}`: TensorFlow Datasets could not download "
            f"and prepare {builder.name} in {builder.data_dir_root} "
            f"({type(error).__name__}: {error}). Without network, pass "
            f"`manual_dir`: {how_to_get_files} "
            "Received: manual_dir=None"
        ) from error


def element_seeds(tf, seed):
    """Returns an infinite dataset of stateless-op seeds of shape `(2,)`.

    Zipping this with examples (or batches) gives each its own seed while
    the whole stream stays reproducible for a fixed `seed`;
    `rerandomize_each_iteration` draws fresh seeds every epoch.
    """
    return tf.data.Dataset.random(
        seed=seed, rerandomize_each_iteration=True
    ).batch(2, drop_remainder=True)
