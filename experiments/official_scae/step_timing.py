"""What `step_time_official.py` (Python 3.7) and `step_time_ours.py` share:
their flags, the timed loop and the record they print. Framework-free, so
that both interpreters import it.

Imported before TensorFlow, it gives both codes TensorFlow's BFC CPU
allocator (`TF_CPU_ALLOCATOR_USE_BFC=true`, as docs/performance.md
recommends) unless the environment says otherwise: it makes the official
step about a third faster on a CPU, and the comparison is fair only with
the same allocator on both sides. The record says which was used.
"""

from __future__ import print_function

import json
import os
import time

import numpy as np

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")


def add_arguments(parser, threads=None):
    """`--steps`, `--warmup`, `--threads` (default `threads`) and
    `--batch-size`."""
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=threads)
    parser.add_argument("--batch-size", type=int, default=128)


def time_steps(step, warmup, steps):
    """Calls `step()` `warmup` times untimed, then `steps` times; returns
    the seconds of each timed call."""
    for _ in range(warmup):
        step()
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    return seconds


def record(code, args, seconds, **extra):
    """The JSON record of one run: `code`, the threads and batch, the
    median and every step's seconds, then `extra`."""
    result = {"code": code}
    result.update(extra)
    result.update(
        {
            "threads": args.threads,
            "batch_size": args.batch_size,
            "median_seconds": float(np.median(seconds)),
            "seconds": [round(s, 4) for s in seconds],
            "tf_cpu_allocator_use_bfc": os.environ["TF_CPU_ALLOCATOR_USE_BFC"],
        }
    )
    return result


def print_record(result):
    print(json.dumps(result))
