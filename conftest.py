"""Pytest configuration: the `large`, `primary_backend` and `backends`
markers, the backend banner, one share of the cores per
pytest-xdist worker on PyTorch, and on JAX one compilation cache for a
run's processes and the non-partitionable Threefry."""

import os
import shutil
import tempfile

import keras
import pytest

# The backend of the tests marked `primary_backend`, which the others
# skip; it also runs every test that no `backends` marker keeps from it
# (see docs/development.md).
PRIMARY_BACKEND = "tensorflow"


def pytest_addoption(parser):
    parser.addoption(
        "--run_large",
        action="store_true",
        default=False,
        help="Run tests marked `large` (real data, long training).",
    )
    parser.addoption(
        "--every_backend",
        action="store_true",
        default=False,
        help=(
            "Run tests marked `primary_backend` on this backend too (they "
            f"run on {PRIMARY_BACKEND} only by default) and those whose "
            "`backends` marker leaves this backend out."
        ),
    )


def pytest_configure(config):
    if keras.backend.backend() == "jax":
        _share_jax_compilations(config)
        _draw_small_kernels_quickly()
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


def _draw_small_kernels_quickly():
    # With JAX's default (partitionable) Threefry, XLA's CPU compiler took
    # 12.5 to 15 s to compile one random draw of a (3, 3, 8, 12) kernel,
    # about 0.3 s without; the JAX run took 16 minutes with the default, 11
    # without (docs/performance.md). The data-parallel collectives check
    # runs in a process of its own and compiles its steps with JAX's
    # default.
    import jax

    jax.config.update("jax_threefry_partitionable", False)


def pytest_report_header(config):
    return f"keras {keras.__version__}, backend: {keras.backend.backend()}"


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--run_large"):
        skip_large = pytest.mark.skip(reason="needs --run_large")
        for item in items:
            if "large" in item.keywords:
                item.add_marker(skip_large)
    if config.getoption("--every_backend"):
        return
    backend = keras.backend.backend()
    for item in items:
        reason = _skip_reason(item, backend)
        if reason is not None:
            item.add_marker(
                pytest.mark.skip(
                    reason=f"{reason} (--every_backend runs it here)"
                )
            )


def _skip_reason(item, backend):
    """Why the markers keep `item` from `backend`, or `None`."""
    if backend != PRIMARY_BACKEND and not _runs_on_every_backend(item):
        return f"primary_backend: runs on {PRIMARY_BACKEND}"
    # The test's own marker, else its class's, else its module's.
    marker = item.get_closest_marker("backends")
    if marker is not None and backend not in marker.args:
        return f"backends: runs on {', '.join(marker.args)}"
    return None


def _runs_on_every_backend(item):
    """False for a test marked `primary_backend`, unless the marker's
    `every_backend` names this case of a parameterized test:
    `@pytest.mark.primary_backend(every_backend=("official",))`, placed
    below `@parameterized.named_parameters` (next to the `def`), runs the
    case `official` on every backend and the others on the primary one."""
    marker = item.get_closest_marker("primary_backend")
    if marker is None:
        return True
    # absl's parameterized cases wrap the test method and add "_<case>" to
    # its name.
    method = getattr(item.obj, "__wrapped__", item.obj).__name__
    return item.name in {
        f"{method}_{case}" for case in marker.kwargs.get("every_backend", ())
    }
