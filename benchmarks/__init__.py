"""Benchmarks of keras_capsules: speed, memory and learning curves.

The benchmarks measure with the speed settings docs/performance.md
recommends, TensorFlow's BFC CPU allocator among them, set before
anything imports TensorFlow unless the caller chose;
`common.environment()` records the value.
"""

import os

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
