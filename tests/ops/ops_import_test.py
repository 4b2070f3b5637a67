"""The ops-only rule: library code reaches frameworks through Keras only."""

import ast
import json
import os
import pathlib
import subprocess
import sys

import keras

import keras_capsules
from keras_capsules.testing import TestCase

_PACKAGE_DIR = pathlib.Path(keras_capsules.__file__).parent
_FRAMEWORKS = ("tensorflow", "tensorflow_datasets", "jax", "torch")
# Only the data pipelines may use TensorFlow, and only inside functions, so
# that importing the package never pulls it in.
_LAZY_FRAMEWORK_DIRS = ("datasets",)


def _library_files():
    return sorted(_PACKAGE_DIR.rglob("*.py"))


def _imported_modules(node):
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module] + [
            f"{node.module}.{alias.name}" for alias in node.names
        ]
    return []


def _is_framework(module):
    return module.split(".")[0] in _FRAMEWORKS


def _is_private_keras(module):
    return module == "keras.src" or module.startswith("keras.src.")


def _module_level_nodes(tree):
    """Nodes outside any function body (module, class and `if` level)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


class OpsImportTest(TestCase):
    def test_library_has_files(self):
        names = {path.name for path in _library_files()}
        self.assertContainsSubset(
            {"squash.py", "dynamic.py", "patches.py", "dense_caps.py"}, names
        )

    def test_no_framework_or_private_keras_imports(self):
        offences = []
        for path in _library_files():
            relative = path.relative_to(_PACKAGE_DIR)
            tree = ast.parse(path.read_text(), filename=str(path))
            lazy_allowed = relative.parts[0] in _LAZY_FRAMEWORK_DIRS
            module_level = set(map(id, _module_level_nodes(tree)))
            for node in ast.walk(tree):
                for module in _imported_modules(node):
                    if _is_private_keras(module):
                        offences.append(f"{relative}:{node.lineno} {module}")
                    elif _is_framework(module) and (
                        not lazy_allowed or id(node) in module_level
                    ):
                        offences.append(f"{relative}:{node.lineno} {module}")
        self.assertEqual(offences, [], "banned imports in library code")

    def test_no_assert_in_library_code(self):
        offences = []
        for path in _library_files():
            tree = ast.parse(path.read_text(), filename=str(path))
            offences.extend(
                f"{path.relative_to(_PACKAGE_DIR)}:{node.lineno}"
                for node in ast.walk(tree)
                if isinstance(node, ast.Assert)
            )
        self.assertEqual(offences, [], "use ValueError/TypeError instead")

    def test_import_loads_no_framework_beyond_keras(self):
        # A fresh interpreter: what Keras itself loads for the backend is
        # allowed, anything more that keras_capsules pulls in is not.
        script = (
            "import json, sys\n"
            "import keras\n"
            "before = {m.split('.')[0] for m in sys.modules}\n"
            "import keras_capsules\n"
            "import keras_capsules.layers\n"
            "import keras_capsules.ops\n"
            "after = {m.split('.')[0] for m in sys.modules}\n"
            "print(json.dumps({'backend': keras.backend.backend(),\n"
            "                  'new': sorted(after - before)}))\n"
        )
        env = dict(os.environ, KERAS_BACKEND=keras.backend.backend())
        result = subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        report = json.loads(result.stdout.strip().splitlines()[-1])
        self.assertEqual(report["backend"], keras.backend.backend())
        loaded = [m for m in report["new"] if m in _FRAMEWORKS]
        self.assertEqual(loaded, [], "keras_capsules imported a framework")

    def test_public_ops_and_layers_are_exported(self):
        for name in ("squash", "dynamic_routing"):
            self.assertTrue(callable(getattr(keras_capsules.ops, name)))
        for name in ("PrimaryCaps", "DenseCaps", "ConvCaps"):
            cls = getattr(keras_capsules.layers, name)
            self.assertTrue(issubclass(cls, keras.layers.Layer))
            self.assertIs(
                keras.saving.get_registered_object(f"keras_capsules>{name}"),
                cls,
            )
