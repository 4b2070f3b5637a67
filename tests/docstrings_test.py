"""Every docstring example of the package runs (on the primary backend).

Examples written as doctests (`>>>`) are executed and their printed output
compared. Fenced ```python blocks are not executed: each module may hold
only the ones listed in `_FENCED`, fragments that cannot run on their own.
A new fenced block fails `test_fenced_blocks_are_known` until it is either
turned into a doctest or listed here with its reason.
"""

import doctest
import importlib
import pkgutil
import re

from absl.testing import parameterized

import keras_capsules
from keras_capsules.testing import TestCase
from tests import backend_marks

# Documentation examples: their ops are tested on every backend by the
# op and layer tests.
pytestmark = backend_marks.RUN_ONCE

_MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(
        keras_capsules.__path__, prefix="keras_capsules."
    )
)

_FENCED = {
    # Eq. 3 of Hinton et al. 2018 and Eq. 4 of Sabour et al. 2017, as code.
    "keras_capsules.losses.spread_loss": 2,
    "keras_capsules.losses.margin_loss": 2,
    # Read the MNIST / smallNORB files, which a fresh clone does not have.
    "keras_capsules.datasets.mnist": 3,
    "keras_capsules.datasets.multi_mnist": 1,
    "keras_capsules.datasets.smallnorb": 2,
    # Reads the authors' weight file, which the package does not ship.
    "keras_capsules.models._reference_weights": 1,
    # Needs a model and its data; the callback's tests train one.
    "keras_capsules.callbacks.capsule_health": 1,
    # Draw a trained model; tests/visualization draws untrained ones.
    "keras_capsules.visualization.capsnet": 2,
    "keras_capsules.visualization.matrix_capsnet": 1,
}


class DocstringsTest(TestCase):
    @parameterized.named_parameters(
        (name.removeprefix("keras_capsules."), name) for name in _MODULES
    )
    def test_doctests_pass(self, name):
        module = importlib.import_module(name)
        finder = doctest.DocTestFinder(exclude_empty=True)
        runner = doctest.DocTestRunner(
            optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
        )
        for test in finder.find(module, name):
            runner.run(test)
        result = runner.summarize(verbose=False)
        self.assertEqual(result.failed, 0, msg=f"{name}: see the output")

    def test_the_examples_are_found(self):
        # Guards the test above against finding nothing.
        counts = {}
        for name in _MODULES:
            module = importlib.import_module(name)
            tests = doctest.DocTestFinder(exclude_empty=True).find(module, name)
            counts[name] = sum(len(test.examples) for test in tests)
        for name in (
            "keras_capsules.ops.em",
            "keras_capsules.models.matrix_capsnet",
            "keras_capsules.models.capsnet",
            "keras_capsules.layers.em_conv_caps",
        ):
            self.assertGreater(counts[name], 0, msg=name)

    def test_fenced_blocks_are_known(self):
        found = {}
        for name in _MODULES:
            module = importlib.import_module(name)
            with open(module.__file__, encoding="utf-8") as file:
                source = file.read()
            count = len(re.findall(r"^\s*```python$", source, re.MULTILINE))
            if count:
                found[name] = count
        self.assertEqual(found, _FENCED)
