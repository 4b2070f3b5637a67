"""Where tests run, when not on every backend (docs/development.md).

Called eagerly, JAX compiles every operation on its own for each new
shape, so the modules of `tests/ops/` and `tests/layers/` that check eager
calls run on TensorFlow and PyTorch (`EAGER`, their `pytestmark`); their
tests that train, predict or call a compiled function run on JAX too
(`COMPILED`, on the test). Tests whose subject is the same code on every
backend and needs neither TensorFlow nor its XLA run once, on PyTorch,
which compiles nothing (`RUN_ONCE`).
"""

import pytest

EAGER = pytest.mark.backends("tensorflow", "torch")
COMPILED = pytest.mark.backends("tensorflow", "jax", "torch")
RUN_ONCE = pytest.mark.backends("torch")
