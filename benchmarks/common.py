"""Timing and memory helpers shared by the benchmark scripts.

Speed is measured here, never asserted in tests. Every figure printed says
which backend, device and versions produced it, so numbers can be compared
only where they were taken under the same conditions.

The device queries import the framework of the active Keras backend
lazily; they never allocate accelerator memory except on PyTorch, where
naming a CUDA device creates its context.
"""

import argparse
import json
import os
import platform
import sys
import time

import keras
import numpy as np

import keras_capsules
from benchmarks._process import cpu_model
from benchmarks._process import predict_timing
from benchmarks._process import train_timing

# The MatrixCapsNet sizes the benchmarks measure: the paper's full network
# (310K parameters) and its small one (68K).
MATRIX_CAPSNET_CONFIGS = {
    name: dict(keras_capsules.models.MatrixCapsNet.presets[name]["config"])
    for name in ("full", "small")
}


def _tensorflow_gpu():
    """The first GPU TensorFlow sees, or None."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    return gpus[0] if gpus else None


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
    if backend == "tensorflow":
        import tensorflow as tf

        if _tensorflow_gpu() is not None:
            info = tf.config.experimental.get_memory_info("GPU:0")
            return info["peak"] / 2**20
    return None


def device_name():
    """The device the backend computes on, in words."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        if device.platform != "cpu":
            return str(device.device_kind)
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    if backend == "tensorflow":
        import tensorflow as tf

        gpu = _tensorflow_gpu()
        if gpu is not None:
            details = tf.config.experimental.get_device_details(gpu)
            return details.get("device_name", gpu.name)
    return f"cpu ({platform.processor() or platform.machine()})"


def framework_version():
    """The version of the framework behind the active Keras backend."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.__version__
    if backend == "torch":
        import torch

        return torch.__version__
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.__version__
    return None


def environment():
    """Backend, device, CPU and library versions, for the record."""
    return {
        "backend": keras.backend.backend(),
        "device": device_name(),
        # Machines of one nominal kind differ 2x in speed: every figure
        # names its CPU.
        "cpu": cpu_model(),
        "keras": keras.__version__,
        "framework": framework_version(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        # XLA's CPU fusion settings change EM routing's speed several
        # times over on JAX (see docs/performance.md), so they are part of the
        # record.
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        # Page faults of a fresh allocation per step cost TensorFlow a
        # third of its training speed (see benchmarks/__init__.py).
        "tf_cpu_allocator_use_bfc": os.environ.get(
            "TF_CPU_ALLOCATOR_USE_BFC", ""
        ),
    }


def xla_compiled(fn):
    """`fn` compiled with XLA (TensorFlow, JAX), or `None` elsewhere."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True)
    if backend == "jax":
        import jax

        return jax.jit(fn)
    return None


def median_call_seconds(fn, steps, *args):
    """Median seconds of `steps` calls of `fn(*args)`, each until its
    result is on the host, after one untimed call."""
    keras.ops.convert_to_numpy(fn(*args))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        keras.ops.convert_to_numpy(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def write_rows(path, args, rows):
    """Writes a script's arguments, the environment and its result rows
    as JSON to `path`, and says so."""
    result = {
        "arguments": vars(args),
        "environment": environment(),
        "rows": rows,
    }
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {path}")


def default_jit_compile(jit=None):
    """`jit` when given; else XLA on TensorFlow and JAX, eager on PyTorch.

    `torch.compile` of these models takes minutes and is not what a
    PyTorch user gets from Keras by default, so it is opt-in.
    """
    if jit is None:
        return keras.backend.backend() != "torch"
    return jit


# `torch.compile` settings for Keras models on PyTorch (`jit_compile=True`):
# Keras runs every layer's `forward` through the same code object, so one
# model needs more compiled variants of it than dynamo's default of 8, and
# when a layer class appears twice with different shapes (ConvCaps1 and
# ConvCaps2) dynamo would otherwise retrace it with symbolic sizes, which
# inductor 2.13 fails on ("cannot determine truth value of Relational").
TORCH_COMPILE_CONFIG = {
    "automatic_dynamic_shapes": False,
    "recompile_limit": 64,
    "accumulated_recompile_limit": 1024,
}

# The partitioner that splits the compiled step into forward and backward
# graphs. With its default budget its heuristics save the deviations from
# the means (votes - mean, one vote-sized tensor per routing iteration)
# for the backward pass instead of recomputing them from the votes, which
# the backward reads anyway: a budget below 1 lets it recompute them.
# EMConvCaps 14x14x32 -> 32, batch 16, 2-core CPU: 9.4 training img/s
# against 7.1 (0.7: 9.5, 0.2: 9.1, 0.05: 7.2).
TORCH_PARTITIONER_CONFIG = {"activation_memory_budget": 0.5}


def official_matrix_optimizer():
    """Adam with the official code's schedule: 0.01 decayed continuously
    by 0.96 every 20,000 steps, `epsilon=1e-8`."""
    return keras.optimizers.Adam(
        learning_rate=keras.optimizers.schedules.ExponentialDecay(
            0.01, decay_steps=20000, decay_rate=0.96
        ),
        epsilon=1e-8,
    )


def configure_torch_compile():
    """Applies `TORCH_COMPILE_CONFIG` to `torch._dynamo.config` and
    `TORCH_PARTITIONER_CONFIG` to `torch._functorch.config`."""
    import torch

    for name, value in TORCH_COMPILE_CONFIG.items():
        setattr(torch._dynamo.config, name, value)
    for name, value in TORCH_PARTITIONER_CONFIG.items():
        setattr(torch._functorch.config, name, value)


def int_list(text):
    """Parses `"1,2,4"` (or `"8"`) into a list of positive integers."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"expected positive integers separated by commas, got {text!r}"
        )
    return values


def time_train_steps(model, x, y, steps=10, warmup=2):
    """Times `model.train_on_batch` on one fixed batch.

    `train_on_batch` returns the logs as NumPy values, which waits for the
    device, so each timed step includes its own completion.

    Returns a dict with the median step time in seconds, training images
    per second, the first-call (compile) time and every timed step.
    """
    return train_timing(
        lambda: model.train_on_batch(x, y), _num_images(x), steps, warmup
    )


def time_predict_steps(model, x, steps=10, warmup=2):
    """Times `model.predict_on_batch` (compiled like training) on a batch.

    Returns a dict with the median call time in seconds, inference images
    per second, the first-call (compile) time and every timed call.
    """
    return predict_timing(
        lambda: model.predict_on_batch(x), _num_images(x), steps, warmup
    )


def _num_images(x):
    first = x[0] if isinstance(x, (list, tuple)) else x
    return len(first)
