"""Benchmarks of keras_capsules: speed, memory and learning curves.

TensorFlow's default CPU allocator returns large buffers to the system,
so every training step page-faults its vote-sized temporaries in again;
its BFC allocator keeps them (small MatrixCapsNet, 32x32 images, batch 32,
TF+XLA, 2-core CPU: 69 -> 80 training img/s in one run, 59 -> 83 in
another; docs/performance.md). The benchmarks measure what
the examples run, so they set it too, before anything imports TensorFlow,
unless the caller chose; `common.environment()` records the value.
"""

import os

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
