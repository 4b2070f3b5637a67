"""Pytest configuration: the `large` marker, the backend banner, one
share of the cores per pytest-xdist worker on PyTorch, and one compilation
cache for a run's processes on JAX."""

import os
import shutil
import tempfile

import keras
import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--run_large",
        action="store_true",
        default=False,
        help="Run tests marked `large` (real data, long training).",
    )


def pytest_configure(config):
    if keras.backend.backend() == "jax":
        _share_jax_compilations(config)
    # PyTorch's OpenMP threads take every core in each xdist worker; with
    # two workers on two cores, its training tests then ran 3 to 4 times
    # slower than with one thread each (TensorFlow and JAX share the cores
    # without that loss).
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and keras.backend.backend() == "torch":
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def _share_jax_compilations(config):
    # Many tests build the same small networks and compile the same
    # functions: JAX's persistent cache, in a folder of this run that its
    # xdist workers share, compiles each of them once.
    folder = os.environ.get("KERAS_CAPSULES_TEST_JAX_CACHE")
    if folder is None:
        folder = tempfile.mkdtemp(prefix="keras_capsules_jax_cache_")
        os.environ["KERAS_CAPSULES_TEST_JAX_CACHE"] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    import jax

    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def pytest_report_header(config):
    return f"keras {keras.__version__}, backend: {keras.backend.backend()}"


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run_large"):
        return
    skip_large = pytest.mark.skip(reason="needs --run_large")
    for item in items:
        if "large" in item.keywords:
            item.add_marker(skip_large)
