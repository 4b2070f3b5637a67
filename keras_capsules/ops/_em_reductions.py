"""Temporary: benchmarks/children_sums.py still imports this module.

Delete this file once it imports `keras_capsules.ops.em._reductions`.
"""

from keras_capsules.ops.em._reductions import chunk_count  # noqa: F401
from keras_capsules.ops.em._reductions import sliced_sum  # noqa: F401
