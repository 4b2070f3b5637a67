"""Where the eager op and layer checks run (docs/development.md).

Called eagerly, JAX compiles every operation on its own for each new
shape, so the modules of `tests/ops/` and `tests/layers/` that check eager
calls run on TensorFlow and PyTorch (`EAGER`, their `pytestmark`); their
tests that train, predict or call a compiled function run on JAX too
(`COMPILED`, on the test).
"""

import pytest

EAGER = pytest.mark.backends("tensorflow", "torch")
COMPILED = pytest.mark.backends("tensorflow", "jax", "torch")
