"""The Stacked Capsule Autoencoder's training state inside a compiled `fit`:
its noise generators, optimizer, loss trackers and probes, against an
eager run of the same steps (on TensorFlow and PyTorch), and across
`keras.callbacks.BackupAndRestore` (on every backend).
"""

import keras
import numpy as np
from keras import ops

from keras_capsules.models import StackedCapsuleAutoencoder
from keras_capsules.testing import TestCase
from tests.layers import scae_cases

_NOISY = ("part_encoder", "object_decoder")
# TensorFlow draws other random numbers under XLA than eagerly: there the
# noisy runs compile without XLA, compared with an eager run, and
# `test_the_fast_configurations_warm_up_in_a_compiled_fit` compares the
# XLA step without noise with an eager run.
_NOISY_COMPILE = (
    {"jit_compile": False} if keras.backend.backend() == "tensorflow" else {}
)


def _model(noise_scale=4.0, **kwargs):
    return StackedCapsuleAutoencoder(
        **scae_cases.SMALL_MODEL, noise_scale=noise_scale, **kwargs
    )


def _data():
    x = scae_cases.images(batch=8, size=28, seed=3)
    return x, np.arange(8) % 10


def _seed_states(model):
    return [
        ops.convert_to_numpy(model.get_layer(name).seed_generator.state)
        for name in _NOISY
    ]


def _state(model):
    """Weights, optimizer variables and noise generator states."""
    return (
        [ops.convert_to_numpy(w) for w in model.weights],
        [ops.convert_to_numpy(v) for v in model.optimizer.variables],
        _seed_states(model),
    )


class _StopAtEpoch(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            raise RuntimeError("interrupted")


def _fit(model, epochs=2, **kwargs):
    x, y = _data()
    return model.fit(
        x, y, batch_size=4, epochs=epochs, shuffle=False, verbose=0, **kwargs
    ).history


def _twin(model, noise_scale=4.0, **kwargs):
    """A model of the same weights and noise generator states."""
    twin = _model(noise_scale, **kwargs)
    twin.set_weights(model.get_weights())
    for state, name in zip(_seed_states(model), _NOISY):
        twin.get_layer(name).seed_generator.state.assign(state)
    return twin


class TrainingStateTest(TestCase):
    def assertSameState(self, a, b):
        # Float32 rounding: the official RMSprop moves a weight by about
        # 3e-5 a step, its squared-gradient averages reach thousands here.
        for group_a, group_b in zip(a, b, strict=True):
            for x, y in zip(group_a, group_b, strict=True):
                self.assertAllClose(x, y, atol=1e-6, rtol=1e-5)

    def assertSameRun(self, compiled, eager, histories):
        """The same generator states, logs, weights and optimizer state."""
        for a, b in zip(_seed_states(compiled), _seed_states(eager)):
            np.testing.assert_array_equal(a, b)
        self.assertEqual(set(histories[0]), set(histories[1]))
        for name, values in histories[0].items():
            self.assertAllClose(
                values, histories[1][name], atol=1e-3, rtol=1e-4, msg=name
            )
        self.assertSameState(_state(compiled), _state(eager))

    def test_state_in_a_compiled_fit_and_across_backup_and_restore(self):
        # Two epochs of two steps with `compile()`'s defaults (without XLA
        # on TensorFlow), the noise on, labels for the probes.
        directory = self.get_temp_dir()
        keras.utils.set_random_seed(5)
        reference = _model()
        initial = _seed_states(reference)
        eager = _twin(reference)
        reference.compile(**_NOISY_COMPILE)
        history = _fit(reference)
        # The generators advanced.
        for before, after in zip(initial, _seed_states(reference)):
            self.assertFalse(np.array_equal(before, after))

        # Interrupted after its first epoch, then resumed in a new
        # process (the same network, its generators where they started):
        # the state of the uninterrupted run.
        keras.utils.set_random_seed(5)
        interrupted = _model()
        interrupted.compile(**_NOISY_COMPILE)
        backup = keras.callbacks.BackupAndRestore(directory)
        with self.assertRaisesRegex(RuntimeError, "interrupted"):
            _fit(interrupted, callbacks=[backup, _StopAtEpoch(1)])
        keras.utils.set_random_seed(5)
        resumed = _model()
        resumed.compile(**_NOISY_COMPILE)
        backup = keras.callbacks.BackupAndRestore(directory)
        self.assertLen(_fit(resumed, callbacks=[backup])["loss"], 1)
        self.assertSameState(_state(resumed), _state(reference))

        # The same steps run eagerly: not on JAX, where every operation of
        # an eager run compiles on its own (a minute for these four steps)
        # and a compiled step holds no state outside its arguments.
        if keras.backend.backend() == "jax":
            return
        eager.compile(run_eagerly=True)
        self.assertSameRun(reference, eager, [history, _fit(eager)])

    def test_the_fast_configurations_warm_up_in_a_compiled_fit(self):
        # `presence_masking="log"` compiles the warm-up schedule: inside a
        # compiled `fit` (XLA where it is the default) the optimizer's step
        # count and rate follow it, and on TensorFlow and PyTorch the run
        # is the same as an eager one: two steps, the second from the state
        # the first left. On TensorFlow this is the XLA step's check; the
        # official masking's compiled run is compared with an eager one in
        # the test above (without XLA there) and trains under XLA in the
        # learning test.
        compiled = _model(noise_scale=0.0, presence_masking="log")
        eager = _twin(compiled, noise_scale=0.0, presence_masking="log")
        compiled.compile()
        history = _fit(compiled, 1)
        self.assertEqual(int(compiled.optimizer.iterations), 2)
        self.assertAllClose(
            float(compiled.optimizer.learning_rate), 3e-4 * 2 / 100
        )
        if keras.backend.backend() == "jax":
            return
        eager.compile(run_eagerly=True)
        self.assertSameRun(compiled, eager, [history, _fit(eager, 1)])
