"""Makes the repository's `benchmarks` package importable by its tests.

The benchmarks are not part of the installed package, and pytest's
importlib import mode leaves `sys.path` alone. The repository root is
appended, not prepended, so `keras_capsules` still comes from the install
under test.
"""

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
if _ROOT not in sys.path:
    sys.path.append(_ROOT)
