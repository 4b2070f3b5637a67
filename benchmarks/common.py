"""Timing and memory helpers shared by the benchmark scripts.

Speed is measured here, never asserted in tests. Every figure printed says
which backend, device and versions produced it, so numbers can be compared
only where they were taken under the same conditions.
"""

import json
import platform
import resource
import statistics
import sys
import time

import keras
import numpy as np


def peak_rss_mib():
    """Peak resident set size of this process, in MiB (Linux: KiB units)."""
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return usage / 1024.0


def device_peak_mib():
    """Peak accelerator memory in MiB, or None on CPU."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        if device.platform == "cpu":
            return None
        stats = device.memory_stats() or {}
        peak = stats.get("peak_bytes_in_use")
        return None if peak is None else peak / 2**20
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            return torch.cuda.max_memory_allocated() / 2**20
    return None


def device_name():
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return str(jax.devices()[0].device_kind)
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    return f"cpu ({platform.processor() or platform.machine()})"


def environment():
    """Backend, device and library versions, for the record."""
    return {
        "backend": keras.backend.backend(),
        "device": device_name(),
        "keras": keras.__version__,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
    }


def time_train_steps(model, x, y, steps=10, warmup=2):
    """Times `model.train_on_batch` on one fixed batch.

    Returns a dict with the median step time in seconds, training images
    per second, and the first-call (compile) time.
    """
    start = time.perf_counter()
    model.train_on_batch(x, y)
    compile_seconds = time.perf_counter() - start
    for _ in range(max(warmup - 1, 0)):
        model.train_on_batch(x, y)
    durations = []
    for _ in range(steps):
        start = time.perf_counter()
        model.train_on_batch(x, y)
        durations.append(time.perf_counter() - start)
    median = statistics.median(durations)
    return {
        "compile_seconds": compile_seconds,
        "step_seconds": median,
        "train_images_per_second": len(x) / median,
    }


def print_result(result, json_path=None):
    print(json.dumps(result, indent=2, sort_keys=True))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True)
