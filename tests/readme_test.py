"""The README's Python snippets, each run as a user would run it.

Every ```python block of README.md runs in a fresh interpreter from an empty
temporary folder (where the files it writes land), with the package that
this test run imports. A snippet runs on the backend it sets in
`KERAS_BACKEND`, or, if it sets none, on Keras's default backend,
TensorFlow, as it would for a user after the README's install lines; on
the other backends it is skipped (what it calls is tested on every backend
by the model tests). So the README's test command, on TensorFlow, runs
every snippet. These tests are not `large`: the snippets are the first code
a user runs, and together they take well under a minute.
"""

import os
import re
import subprocess
import sys

import keras
from absl.testing import parameterized

from keras_capsules.testing import TestCase

_README = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md"
)
_TIMEOUT = 300
# The backend Keras picks when KERAS_BACKEND is not set.
_DEFAULT_BACKEND = "tensorflow"
# `os.environ["KERAS_BACKEND"] = "jax"` or
# `os.environ.setdefault("KERAS_BACKEND", "jax")`.
_SETS_BACKEND = re.compile(
    r"os\.environ(?:\[\s*[\"']KERAS_BACKEND[\"']\s*\]\s*=|"
    r"\.setdefault\(\s*[\"']KERAS_BACKEND[\"']\s*,)\s*[\"'](\w+)[\"']"
)


def python_snippets(markdown):
    """The ```python blocks of `markdown` as `(name, code)` pairs.

    A snippet is named after the `##` section it is in, with `_2`, `_3`, ...
    for a second and third one in the same section.
    """
    snippets = []
    counts = {}
    section = "top"
    code = None
    for line in markdown.splitlines():
        if code is not None:
            if line.strip() == "```":
                counts[section] = counts.get(section, 0) + 1
                name = section
                if counts[section] > 1:
                    name = f"{section}_{counts[section]}"
                snippets.append((name, "\n".join(code) + "\n"))
                code = None
            else:
                code.append(line)
        elif line.startswith("## "):
            section = re.sub(r"\W+", "_", line[3:].lower()).strip("_")
        elif line.strip() == "```python":
            code = []
    return snippets


def snippet_backend(code):
    """The backend that `code` sets in `KERAS_BACKEND`, or None."""
    if "KERAS_BACKEND" not in code:
        return None
    match = _SETS_BACKEND.search(code)
    if match is None:
        raise ValueError(
            "A README snippet mentions KERAS_BACKEND but does not set it "
            'as `os.environ["KERAS_BACKEND"] = "<backend>"`, so the test '
            "cannot tell which backend it is for. Received: "
            f"code={code!r}"
        )
    return match.group(1)


with open(_README, encoding="utf-8") as _file:
    _SNIPPETS = python_snippets(_file.read())


class ReadmeSnippetTest(TestCase):
    def test_every_python_block_is_found(self):
        with open(_README, encoding="utf-8") as file:
            fences = [line for line in file if line.strip() == "```python"]
        self.assertNotEmpty(_SNIPPETS)
        self.assertLen(_SNIPPETS, len(fences))

    def test_the_parser(self):
        markdown = (
            "# Title\n```python\nprint(0)\n```\n"
            "## Quick start\n```shell\npip install x\n```\n"
            "```python\nprint(1)\n```\n\n```python\nprint(2)\n```\n"
            "## Saving, loading\n```python\nprint(3)\n\nprint(4)\n```\n"
        )
        self.assertEqual(
            python_snippets(markdown),
            [
                ("top", "print(0)\n"),
                ("quick_start", "print(1)\n"),
                ("quick_start_2", "print(2)\n"),
                ("saving_loading", "print(3)\n\nprint(4)\n"),
            ],
        )

    def test_the_backend_of_a_snippet(self):
        self.assertIsNone(snippet_backend("import keras\n"))
        self.assertEqual(
            snippet_backend('os.environ["KERAS_BACKEND"] = "jax"  # or\n'),
            "jax",
        )
        self.assertEqual(
            snippet_backend("os.environ.setdefault('KERAS_BACKEND', 'torch')"),
            "torch",
        )
        with self.assertRaisesRegex(ValueError, "cannot tell which backend"):
            snippet_backend('os.environ.update(KERAS_BACKEND="jax")')

    @parameterized.named_parameters(_SNIPPETS)
    def test_snippet_runs(self, code):
        backend = keras.backend.backend()
        wanted = snippet_backend(code) or _DEFAULT_BACKEND
        if wanted != backend:
            self.skipTest(
                f"the snippet runs on {wanted!r} (it sets KERAS_BACKEND, or "
                f"Keras's default applies) and this run is on {backend!r}"
            )
        directory = self.get_temp_dir()
        script = os.path.join(directory, "snippet.py")
        with open(script, "w", encoding="utf-8") as file:
            file.write(code)
        result = subprocess.run(
            [sys.executable, script],
            cwd=directory,
            env=dict(os.environ, KERAS_BACKEND=backend, MPLBACKEND="Agg"),
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
        )
        self.assertEqual(
            result.returncode,
            0,
            f"README snippet failed on {backend}:\n{code}\n"
            f"{result.stdout[-2000:]}\n{result.stderr[-5000:]}",
        )
