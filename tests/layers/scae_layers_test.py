"""The four Stacked Capsule Autoencoder layers through the package's
`TestCase.run_layer_test`: config round trip, building from shapes,
symbolic and eager calls, a training step inside `fit` and `.keras`
saving."""

import warnings

from absl.testing import parameterized

from keras_capsules.testing import TestCase
from tests import backend_marks
from tests.layers import scae_cases

pytestmark = backend_marks.EAGER


class ScaeLayersTest(TestCase):
    @parameterized.named_parameters(
        (name, cls, kwargs, data, shapes)
        for name, cls, kwargs, data, shapes in (
            scae_cases.run_layer_test_cases()
        )
    )
    # Not on JAX either: the autoencoder's own tests fit, save and load
    # these four layers there, compiled.
    def test_run_layer_test(self, cls, kwargs, data, shapes):
        with warnings.catch_warnings():
            # The training check fits the batched outputs only: the
            # decoder's background constants, and `ObjectCapsuleDecoder`'s
            # unused `dummy_vote` (the official one's), get no gradient.
            warnings.filterwarnings("ignore", "Gradients do not exist")
            self.run_layer_test(
                cls,
                kwargs,
                input_data=data,
                expected_output_shape=shapes,
            )
