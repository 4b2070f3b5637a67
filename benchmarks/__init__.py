"""Benchmarks of keras_capsules: speed, memory and learning curves.

The benchmarks measure what the example scripts run, so they use
TensorFlow's BFC CPU allocator as `examples/_training.py` does (why:
docs/performance.md), set before anything imports TensorFlow unless the
caller chose; `common.environment()` records the value.
"""

import os

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
