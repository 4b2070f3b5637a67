"""The Stacked Capsule Autoencoder's training state inside a compiled `fit`:
its noise generators, optimizer, loss trackers and probes, against an
eager run of the same steps, and across `keras.callbacks.BackupAndRestore`.
"""

import keras
import numpy as np
from absl.testing import parameterized
from keras import ops

from keras_capsules.models import StackedCapsuleAutoencoder
from keras_capsules.testing import TestCase
from tests.layers import scae_cases

_NOISY = ("part_encoder", "object_decoder")


def _model(noise_scale=4.0):
    return StackedCapsuleAutoencoder(
        **scae_cases.SMALL_MODEL, noise_scale=noise_scale
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


class TrainingStateTest(TestCase):
    def assertSameState(self, a, b):
        # Float32 rounding: the official RMSprop moves a weight by about
        # 3e-5 a step, its squared-gradient averages reach thousands here.
        for group_a, group_b in zip(a, b, strict=True):
            for x, y in zip(group_a, group_b, strict=True):
                self.assertAllClose(x, y, atol=1e-6, rtol=1e-5)

    @parameterized.named_parameters(
        ("noise", 4.0, False), ("no_noise_xla", 0.0, True)
    )
    def test_compiled_fit_equals_an_eager_run_of_the_same_steps(
        self, noise_scale, xla
    ):
        # TensorFlow draws other random numbers under XLA than eagerly: its
        # noisy run compiles without XLA, and a noise-free run checks the
        # XLA step. JAX and PyTorch compile as `compile()` does, noise on.
        tensorflow = keras.backend.backend() == "tensorflow"
        if xla and not tensorflow:
            self.skipTest("the noisy run compiles as compile() does here")
        jit_compile = "auto" if xla or not tensorflow else False
        x, y = _data()
        compiled, eager = _model(noise_scale), _model(noise_scale)
        eager.set_weights(compiled.get_weights())
        initial = _seed_states(compiled)
        for state, name in zip(initial, _NOISY):
            eager.get_layer(name).seed_generator.state.assign(state)
        compiled.compile(jit_compile=jit_compile)
        eager.compile(run_eagerly=True)
        fits = [
            model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
            for model in (compiled, eager)
        ]
        # The generators advanced (when there is noise), alike.
        for before, after in zip(initial, _seed_states(compiled)):
            self.assertEqual(np.array_equal(before, after), not noise_scale)
        for a, b in zip(_seed_states(compiled), _seed_states(eager)):
            np.testing.assert_array_equal(a, b)
        # Loss, every tracked term and the probes' metrics.
        self.assertEqual(set(fits[0].history), set(fits[1].history))
        for name, values in fits[0].history.items():
            self.assertAllClose(
                values, fits[1].history[name], atol=1e-3, rtol=1e-4, msg=name
            )
        # Weights (the probes' too) and the optimizer's state.
        self.assertSameState(_state(compiled), _state(eager))

    def test_backup_and_restore_resumes_the_noise_and_the_optimizer(self):
        x, y = _data()
        directory = self.get_temp_dir()
        fit = dict(batch_size=4, epochs=2, shuffle=False, verbose=0)
        keras.utils.set_random_seed(5)
        uninterrupted = _model()
        uninterrupted.compile()
        uninterrupted.fit(x, y, **fit)
        expected = _state(uninterrupted)

        keras.utils.set_random_seed(5)
        interrupted = _model()
        interrupted.compile()
        backup = keras.callbacks.BackupAndRestore(directory)
        with self.assertRaisesRegex(RuntimeError, "interrupted"):
            interrupted.fit(x, y, callbacks=[backup, _StopAtEpoch(1)], **fit)
        # A new process: the same network, its generators where they
        # started.
        keras.utils.set_random_seed(5)
        resumed = _model()
        resumed.compile()
        backup = keras.callbacks.BackupAndRestore(directory)
        history = resumed.fit(x, y, callbacks=[backup], **fit)
        self.assertLen(history.history["loss"], 1)
        self.assertSameState(_state(resumed), expected)
