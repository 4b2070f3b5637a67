"""The recipes in `examples/`: their rules, and each run with `--smoke`."""

import ast
import glob
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules.datasets import mnist
from keras_capsules.testing import TestCase

# The recipes' rules and smoke runs: the models they call are tested on
# every backend by the model tests.
pytestmark = pytest.mark.primary_backend

_EXAMPLES_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"
)
_SCRIPTS = sorted(glob.glob(os.path.join(_EXAMPLES_DIR, "*.py")))
_MAX_LINES = 160
_FLAGS = {
    "--data-dir",
    "--epochs",
    "--batch-size",
    "--output-dir",
    "--smoke",
    # Images of your own (custom_images.py).
    "--test-dir",
    "--image-size",
    "--color-mode",
    "--from-preset",
}
_ALLOWED_MODULES = {
    "argparse",
    "os",
    "sys",
    "time",
    "keras",
    "numpy",
    "keras_capsules",
}


def _named(scripts):
    return [(os.path.splitext(os.path.basename(s))[0], s) for s in scripts]


def _tree(script):
    with open(script) as file:
        return ast.parse(file.read(), filename=script)


def imported_modules(tree):
    """The dotted names a module imports, with `from` imports' names."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                names.append("." * node.level + (node.module or ""))
                continue
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def rule_violations(script):
    """What `script` does against the rules of a recipe, as messages."""
    with open(script) as file:
        source = file.read()
    tree = ast.parse(source, filename=script)
    problems = []
    name = os.path.basename(script)
    if name.startswith("_"):
        problems.append("a helper module: recipes are self-contained")
    if len(source.splitlines()) > _MAX_LINES:
        problems.append(f"longer than {_MAX_LINES} lines")
    docstring = ast.get_docstring(tree) or ""
    if "Usage:" not in docstring:
        problems.append("no module docstring with a Usage: section")
    for module in imported_modules(tree):
        parts = module.split(".")
        if module.startswith("."):
            problems.append(f"relative import {module}")
        elif parts[0] not in _ALLOWED_MODULES:
            problems.append(f"imports {module}")
        elif parts[0] == "keras_capsules" and any(
            part.startswith("_") for part in parts
        ):
            problems.append(f"imports the private {module}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            flags = [
                arg.value
                for arg in node.args
                if isinstance(arg, ast.Constant) and str(arg.value)[:1] == "-"
            ]
            problems += [f"flag {f}" for f in flags if f not in _FLAGS]
    if ".fit(" not in source:
        problems.append("no fit call in sight")
    return problems


class RecipeRulesTest(TestCase):
    def test_the_recipes_are_there(self):
        self.assertEqual(
            [name for name, _ in _named(_SCRIPTS)],
            [
                "capsnet_mnist",
                "custom_images",
                "efficient_capsnet_mnist",
                "matrix_capsnet_mnist",
                "matrix_capsnet_smallnorb",
                "stacked_capsule_autoencoder_mnist",
            ],
        )

    @parameterized.named_parameters(_named(_SCRIPTS))
    def test_recipe_rules(self, script):
        self.assertEqual(rule_violations(script), [])

    def test_the_checker_finds_violations(self):
        script = os.path.join(self.get_temp_dir(), "_bad.py")
        with open(script, "w") as file:
            file.write(
                "import _training\n"
                "from . import helpers\n"
                "from keras_capsules.models import _official\n"
                "parser.add_argument('--manual-dir')\n" + "x = 1\n" * _MAX_LINES
            )
        self.assertEqual(
            rule_violations(script),
            [
                "a helper module: recipes are self-contained",
                f"longer than {_MAX_LINES} lines",
                "no module docstring with a Usage: section",
                "imports _training",
                "relative import .",
                "imports the private keras_capsules.models._official",
                "flag --manual-dir",
                "no fit call in sight",
            ],
        )


def run_recipe(script, *flags, cwd):
    """Runs a recipe in a fresh interpreter from `cwd`, so that the default
    output paths land there; the backend is inherited. Returns its
    stdout."""
    result = subprocess.run(
        [sys.executable, script, "--smoke", *flags],
        cwd=cwd,
        env=dict(os.environ, MPLBACKEND="Agg"),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if result.returncode:
        raise AssertionError(
            f"{os.path.basename(script)} --smoke {' '.join(flags)} failed:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
        )
    return result.stdout


@pytest.mark.large
class RecipeSmokeTest(TestCase):
    @parameterized.named_parameters(_named(_SCRIPTS))
    def test_smoke(self, script):
        output = run_recipe(script, cwd=self.get_temp_dir())
        # The EfficientCapsNet recipe, which may run in several processes,
        # compares weights: `predict` fails in a multi-process job.
        self.assertRegex(
            output, "predicts the same|loads with the trained weights"
        )

    def test_custom_images_from_a_preset(self):
        # Five digits of the sample as train and test folders: a preset
        # with 5 new class capsules, scored on the test folder.
        folder = self.get_temp_dir()
        for split in ("train", "test"):
            x, y = mnist.load_sample(split)
            for label in range(5):
                directory = os.path.join(folder, split, str(label))
                os.makedirs(directory)
                for i in np.flatnonzero(y.argmax(-1) == label)[:4]:
                    keras.utils.save_img(
                        os.path.join(directory, f"{i}.png"), x[i]
                    )
        output = run_recipe(
            os.path.join(_EXAMPLES_DIR, "custom_images.py"),
            *("--data-dir", os.path.join(folder, "train")),
            *("--test-dir", os.path.join(folder, "test")),
            *("--from-preset", "capsnet_mnist"),
            cwd=folder,
        )
        self.assertIn("Classes: ['0', '1', '2', '3', '4']", output)
        self.assertIn("Test accuracy:", output)
        self.assertIn("predicts the same", output)
