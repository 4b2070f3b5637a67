"""The relative links and images of README.md, docs/ and the benchmark
records' README point at files that exist, and their `#anchors` at headings
of the Markdown files they name."""

import pathlib
import re

import pytest

from keras_capsules.testing import TestCase

# Links of the Markdown files: no backend involved.
pytestmark = pytest.mark.primary_backend

_ROOT = pathlib.Path(__file__).resolve().parent.parent
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
# `[text](target)` and `![alt](target)`, with an optional "title".
_INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# `[label]: target`, the definition of a reference-style link.
_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def _documents():
    return [
        _ROOT / "README.md",
        _ROOT / "benchmarks" / "results" / "README.md",
        *sorted((_ROOT / "docs").rglob("*.md")),
    ]


def _prose(text):
    """`text` without fenced code blocks and code spans, whose brackets are
    not links."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _CODE_SPAN.sub("", text)


def links(text):
    """The targets of the inline links, images and link definitions of the
    Markdown `text`."""
    prose = _prose(text)
    return _INLINE.findall(prose) + _DEFINITION.findall(prose)


def slug(heading):
    """GitHub's anchor of a heading: markup and punctuation dropped, lower
    case, spaces as hyphens."""
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    heading = re.sub(r"[^\w\- ]", "", heading.lower())
    return heading.replace(" ", "-")


def anchors(text):
    """The anchors of the headings of the Markdown `text` (a repeated
    heading gets `-1`, `-2`, ... as on GitHub) and of its HTML anchors."""
    found, seen = set(_HTML_ANCHOR.findall(text)), {}
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path):
    """`target: reason` for every relative link of the Markdown file `path`
    that does not resolve."""
    problems = []
    for target in links(path.read_text()):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
            continue  # https:, mailto: and other absolute URLs.
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md":
            if anchor not in anchors(linked.read_text()):
                problems.append(f"{target}: no such heading")
    return problems


class DocsTest(TestCase):
    def test_relative_links_and_images_resolve(self):
        found = []
        for path in _documents():
            for problem in broken_links(path):
                found.append(f"{path.relative_to(_ROOT)}: {problem}")
        self.assertEqual(found, [])

    def test_the_checker_finds_broken_links(self):
        folder = pathlib.Path(self.get_temp_dir())
        (folder / "images").mkdir()
        (folder / "images" / "figure.png").write_bytes(b"")
        (folder / "other.md").write_text("# Other page\n\n## On a GPU: H200\n")
        page = folder / "page.md"
        page.write_text(
            "# Page title\n\n"
            "[fine](other.md), [fine](other.md#on-a-gpu-h200), "
            "[fine](#page-title), ![fine](images/figure.png), "
            "[web](https://example.com/missing.md), "
            "`[code](missing_in_code.md)`\n\n"
            "```\n[fenced](missing_in_fence.md)\n```\n\n"
            "[gone](missing.md), [gone](other.md#no-heading), "
            "![gone](images/missing.png)\n\n"
            "[ref]: missing_reference.md\n"
        )
        self.assertEqual(
            broken_links(page),
            [
                "missing.md: no such file",
                "other.md#no-heading: no such heading",
                "images/missing.png: no such file",
                "missing_reference.md: no such file",
            ],
        )

    def test_slug_follows_github(self):
        self.assertEqual(
            slug("On a GPU: NVIDIA H200, JAX"), "on-a-gpu-nvidia-h200-jax"
        )
        self.assertEqual(
            slug("`perturbation_grid(model, image)`"),
            "perturbation_gridmodel-image",
        )
        self.assertEqual(
            slug("One epoch: Adam's epsilon"), "one-epoch-adams-epsilon"
        )
