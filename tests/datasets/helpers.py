"""Helpers shared by the dataset tests: TFDS present or absent, batches as
NumPy, and a guard that fails a test which would download."""

import contextlib
import socket
import sys
from unittest import mock

import numpy as np
import pytest

_ABSENT = object()


def tfds_or_skip():
    """`tensorflow_datasets`, or skips the test when it is not installed."""
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        pytest.skip("tensorflow_datasets is not installed")
    return tfds


@contextlib.contextmanager
def without_tfds():
    """Makes `import tensorflow_datasets` fail, touching nothing else."""
    # Only this entry is swapped: restoring all of sys.modules would drop
    # modules that TensorFlow imports lazily meanwhile.
    saved = sys.modules.get("tensorflow_datasets", _ABSENT)
    sys.modules["tensorflow_datasets"] = None
    try:
        yield
    finally:
        if saved is _ABSENT:
            del sys.modules["tensorflow_datasets"]
        else:
            sys.modules["tensorflow_datasets"] = saved


class DownloadAttempted(Exception):
    """Raised by a TFDS download entry point under `no_downloads`."""


# Where TFDS fetches data: a builder's `download_and_prepare` (which
# `tfds.load(download=True)` calls) and the download manager it hands to
# the dataset's own code.
_DOWNLOAD_ENTRY_POINTS = (
    ("core.DatasetBuilder", "download_and_prepare"),
    ("download.DownloadManager", "download"),
    ("download.DownloadManager", "download_and_extract"),
)


@contextlib.contextmanager
def no_downloads(tfds):
    """Replaces every TFDS download entry point with one that records the
    call and raises `DownloadAttempted`.

    Yields a `mock.Mock` called once per attempt with the entry point's
    name; a test asserts `attempts.assert_not_called()`.
    """
    attempts = mock.Mock()
    with contextlib.ExitStack() as stack:
        for owner, name in _DOWNLOAD_ENTRY_POINTS:
            target = tfds
            for part in owner.split("."):
                target = getattr(target, part)

            def attempt(*args, _name=f"{owner}.{name}", **kwargs):
                attempts(_name)
                raise DownloadAttempted(_name)

            stack.enter_context(
                mock.patch.object(target, name, side_effect=attempt)
            )
        yield attempts


@contextlib.contextmanager
def no_network():
    """Makes every name lookup and socket connection record the call and
    raise `DownloadAttempted`.

    Unlike `no_downloads`, it lets a builder prepare a dataset from
    `manual_dir`, which needs no network. Yields the `mock.Mock` of the
    attempts.
    """
    attempts = mock.Mock()

    def attempt(*args, **kwargs):
        attempts(*args)
        raise DownloadAttempted(repr(args))

    with contextlib.ExitStack() as stack:
        stack.enter_context(
            mock.patch.object(socket, "getaddrinfo", side_effect=attempt)
        )
        stack.enter_context(
            mock.patch.object(socket.socket, "connect", attempt)
        )
        yield attempts


@contextlib.contextmanager
def download_spy(tfds):
    """Replaces `DatasetBuilder.download_and_prepare` with a no-op mock
    that records its builder, and spies on `tfds.builder` and `tfds.load`.

    Yields `(download_and_prepare, builder, load)`, the three mocks;
    `download_and_prepare.call_args.args[0]` is the builder it was called
    on.
    With `tfds.testing.mock_data` around it, the loaders then read mock
    data as if the download had happened.
    """
    with contextlib.ExitStack() as stack:
        prepare = stack.enter_context(
            mock.patch.object(
                tfds.core.DatasetBuilder, "download_and_prepare", autospec=True
            )
        )
        builder = stack.enter_context(
            mock.patch.object(tfds, "builder", wraps=tfds.builder)
        )
        load = stack.enter_context(
            mock.patch.object(tfds, "load", wraps=tfds.load)
        )
        yield prepare, builder, load


def batches(dataset):
    """Every batch of a `tf.data.Dataset` as a tuple of NumPy arrays."""
    return [
        tuple(np.asarray(t) for t in batch)
        for batch in dataset.as_numpy_iterator()
    ]
