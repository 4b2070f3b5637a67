"""Rules of the code base's layout that a linter does not check.

- A name with a leading underscore is used only in the module that defines it:
  no `from m import _f` and no `m._f` for a module `m` of this repository, in
  the package, the benchmarks, the examples, the experiments, the scripts or
  the tests. What several modules share lives in a private module (a file named
  `_*.py`) under a plain name, and importing that module is allowed.
- Only `keras_capsules/ops/_backend.py` asks which backend runs.
- No module of `keras_capsules/ops/` (the EM engine in `ops/em/`
  included), `keras_capsules/layers/` or `keras_capsules/models/` is
  longer than 450 lines.
- The docstrings of public classes and of their `__init__` are references
  of at most 90 lines each; the narrative lives in `docs/`.
"""

import ast
import inspect
import pathlib

import pytest

import keras_capsules
from keras_capsules.testing import TestCase

# Rules of the source tree: no backend involved.
pytestmark = pytest.mark.primary_backend

_ROOT = pathlib.Path(__file__).resolve().parent.parent
_FOLDERS = (
    "keras_capsules",
    "benchmarks",
    "examples",
    "experiments",
    "scripts",
    "tests",
)
_MAX_LINES = 450
_MAX_DOCSTRING_LINES = 90


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


def _absolute(path, node):
    """The module a `from ... import` names, relative imports resolved."""
    if not node.level:
        return node.module
    package = path.relative_to(_ROOT).parent.parts
    package = package[: len(package) - node.level + 1]
    return ".".join(package + ((node.module,) if node.module else ()))


def _dotted(node, aliases):
    """The module path that the expression `node` names, or `None`."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _private_uses(path):
    """`(line, text)` of every private name of another module that `path`
    uses: imported by name, or read as an attribute of a module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    uses, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_own_module(path, alias.name):
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        root = alias.name.split(".")[0]
                        aliases[root] = root
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(path, node)
            if not module or not _is_own_module(path, module):
                continue
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                if _is_own_module(path, submodule):
                    aliases[alias.asname or alias.name] = submodule
                elif _is_private(alias.name):
                    uses.append(
                        (node.lineno, f"from {module} import {alias.name}")
                    )
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
            continue
        module = _dotted(node.value, aliases)
        if (
            module is not None
            and _is_own_module(path, module)
            and not _is_own_module(path, f"{module}.{node.attr}")
        ):
            uses.append((node.lineno, f"{module}.{node.attr}"))
    return uses


class ArchitectureTest(TestCase):
    def test_no_private_name_crosses_a_module(self):
        found = []
        paths = [_ROOT / "conftest.py"]
        for folder in _FOLDERS:
            paths += sorted((_ROOT / folder).rglob("*.py"))
        for path in paths:
            for line, text in _private_uses(path):
                found.append(f"{path.relative_to(_ROOT)}:{line}: {text}")
        self.assertEqual(found, [])

    def test_the_checker_finds_private_uses(self):
        path = pathlib.Path(self.get_temp_dir()) / "example.py"
        path.write_text(
            "import keras_capsules.ops.patches\n"
            "from keras_capsules import ops\n"
            "from keras_capsules.ops import em\n"
            "from keras_capsules.ops.patches import _check_static\n"
            "from keras_capsules.ops import _tiles\n"
            "em._DEFAULTS, _tiles.fold_tiles, ops._tiles.fold_tiles\n"
            "keras_capsules.ops.patches._check_static, ops.em._DEFAULTS\n"
        )
        self.assertEqual(
            sorted(text for _, text in _private_uses(path)),
            [
                "from keras_capsules.ops.patches import _check_static",
                "keras_capsules.ops.em._DEFAULTS",
                "keras_capsules.ops.em._DEFAULTS",
                "keras_capsules.ops.patches._check_static",
            ],
        )

    def test_library_modules_stay_short(self):
        found = []
        for folder in (
            "keras_capsules/ops",
            "keras_capsules/layers",
            "keras_capsules/models",
        ):
            for path in sorted((_ROOT / folder).rglob("*.py")):
                lines = len(path.read_text().splitlines())
                if lines > _MAX_LINES:
                    found.append(f"{path.relative_to(_ROOT)}: {lines} lines")
        self.assertEqual(found, [])

    def test_public_class_docstrings_stay_short(self):
        found = []
        for module_name in keras_capsules.__all__:
            module = getattr(keras_capsules, module_name)
            if not inspect.ismodule(module):
                continue
            for name, value in vars(module).items():
                if name.startswith("_") or not inspect.isclass(value):
                    continue
                for where, doc in (
                    (name, value.__doc__),
                    (f"{name}.__init__", vars(value).get("__init__", None)),
                ):
                    if callable(doc):
                        doc = doc.__doc__
                    lines = len((doc or "").splitlines())
                    if lines > _MAX_DOCSTRING_LINES:
                        found.append(f"{module_name}.{where}: {lines} lines")
        self.assertEqual(found, [])

    def test_only_the_backend_module_asks_for_the_backend(self):
        found = [
            str(path.relative_to(_ROOT))
            for path in sorted((_ROOT / "keras_capsules").rglob("*.py"))
            if "backend.backend()" in path.read_text()
        ]
        self.assertEqual(found, ["keras_capsules/ops/_backend.py"])

    def test_only_the_visualization_package_imports_matplotlib(self):
        # matplotlib is an optional extra: the rest of the package must
        # import without it.
        found = set()
        for path in sorted((_ROOT / "keras_capsules").rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                else:
                    continue
                if any(n.split(".")[0] == "matplotlib" for n in names):
                    found.add(path.relative_to(_ROOT).parts[:2])
        self.assertEqual(found, {("keras_capsules", "visualization")})
