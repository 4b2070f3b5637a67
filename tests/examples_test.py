"""Runs every script in `examples/` with `--smoke` on the current backend."""

import glob
import os
import subprocess
import sys

import keras
import pytest
from absl.testing import parameterized

from keras_capsules.testing import TestCase

_EXAMPLES_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"
)
# `_`-prefixed modules hold code the scripts share; they are not scripts.
_SCRIPTS = sorted(
    path
    for path in glob.glob(os.path.join(_EXAMPLES_DIR, "*.py"))
    if not os.path.basename(path).startswith("_")
)


@pytest.mark.large
class ExamplesTest(TestCase):
    def test_examples_are_found(self):
        self.assertIn(
            "capsnet_mnist.py", [os.path.basename(s) for s in _SCRIPTS]
        )

    @parameterized.named_parameters(
        [
            (os.path.splitext(os.path.basename(script))[0], script)
            for script in _SCRIPTS
        ]
        + [
            # The functional model of the layers, with the cosine schedule.
            (
                "matrix_capsnet_mnist_layers",
                os.path.join(_EXAMPLES_DIR, "matrix_capsnet_mnist.py"),
                ("--model", "layers", "--lr-schedule", "cosine"),
            )
        ]
    )
    def test_smoke(self, script, extra_args=()):
        if (
            os.path.basename(script) == "data_parallel.py"
            and keras.backend.backend() == "torch"
        ):
            # No data-parallel engine on PyTorch: the script must refuse.
            result = subprocess.run(
                [sys.executable, script, "--smoke"],
                cwd=self.get_temp_dir(),
                capture_output=True,
                text=True,
                timeout=600,
            )
            self.assertNotEqual(result.returncode, 0)
            self.assertIn("not supported", result.stderr)
            return
        # A fresh interpreter per script, run from a temporary folder so
        # that default output paths land there; the backend is inherited.
        result = subprocess.run(
            [sys.executable, script, "--smoke", *extra_args],
            cwd=self.get_temp_dir(),
            env=dict(os.environ, MPLBACKEND="Agg"),
            capture_output=True,
            text=True,
            timeout=1200,
        )
        self.assertEqual(
            result.returncode,
            0,
            f"{os.path.basename(script)} --smoke failed:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}",
        )
