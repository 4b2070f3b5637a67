"""Rules of the code base's layout that a linter does not check.

- A name with a leading underscore is used only in the module that defines
  it: no `from m import _f` and no `m._f` for a module `m` of this
  repository, in the package, the benchmarks, the examples, the scripts or
  the tests. What several modules share lives in a private module (a file
  named `_*.py`) under a plain name, and importing that module is allowed.
- Only `keras_capsules/ops/_backend.py` asks which backend runs.
"""

import ast
import pathlib

from keras_capsules.testing import TestCase

_ROOT = pathlib.Path(__file__).resolve().parent.parent
_FOLDERS = ("keras_capsules", "benchmarks", "examples", "scripts", "tests")


def _is_private(name):
    return name.startswith("_") and not name.startswith("__")


def _is_own_module(path, module):
    """Whether the dotted `module` is a file or package of this repository,
    found from the root or, as examples import their helpers, beside
    `path`."""
    relative = module.replace(".", "/")
    for base in (_ROOT, path.parent):
        if (base / f"{relative}.py").is_file() or (base / relative).is_dir():
            return True
    return False


def _private_uses(path):
    """`(line, text)` of every private name of another module that `path`
    uses."""
    tree = ast.parse(path.read_text(), filename=str(path))
    uses, own_modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_own_module(path, alias.name):
                    own_modules.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module:
            if not _is_own_module(path, node.module):
                continue
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if _is_own_module(path, submodule):
                    own_modules.add(alias.asname or alias.name)
                elif _is_private(alias.name):
                    uses.append(
                        (node.lineno, f"from {node.module} import {alias.name}")
                    )
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _is_private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in own_modules
        ):
            uses.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return uses


class ArchitectureTest(TestCase):
    def test_no_private_name_crosses_a_module(self):
        found = []
        for folder in _FOLDERS:
            for path in sorted((_ROOT / folder).rglob("*.py")):
                for line, text in _private_uses(path):
                    found.append(f"{path.relative_to(_ROOT)}:{line}: {text}")
        self.assertEqual(found, [])

    def test_the_checker_finds_private_uses(self):
        path = pathlib.Path(self.get_temp_dir()) / "example.py"
        path.write_text(
            "from keras_capsules.ops import em\n"
            "from keras_capsules.ops.patches import _check_static\n"
            "from keras_capsules.ops import _tiles\n"
            "em._DEFAULTS, _tiles.fold_tiles\n"
        )
        self.assertEqual(
            [text for _, text in _private_uses(path)],
            [
                "from keras_capsules.ops.patches import _check_static",
                "em._DEFAULTS",
            ],
        )

    def test_only_the_backend_module_asks_for_the_backend(self):
        found = [
            str(path.relative_to(_ROOT))
            for path in sorted((_ROOT / "keras_capsules").rglob("*.py"))
            if "backend.backend()" in path.read_text()
        ]
        self.assertEqual(found, ["keras_capsules/ops/_backend.py"])
