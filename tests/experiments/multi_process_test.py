"""Two processes on this machine train as one (JAX's distributed runtime,
gloo collectives on the CPU, `keras.distribution.DataParallel`).

`experiments/multi_process.py --processes 2` starts two processes, each
pinned to one core, that join one job, assert that JAX sees two processes,
and train the smallest CapsNet on their own halves of every global batch
of `mnist.ShiftedDigits`. The process layer is the same for every network:
EfficientCapsNet (whose batch-norm statistics are all-reduced too),
MatrixCapsNet and the SCAE pass the same checks outside CI
(docs/data_parallel.md), and `data_parallel_test.py` checks the
collectives and the training of all four on two devices of one
process. The tests
check that both end with the same weights, that these are the weights of
one process trained on the whole global batches, that the presets
process 0 alone wrote hold them, and that a two-process run
stopped at an epoch boundary and resumed from its backups ends with the
weights of the uninterrupted run.

Every launch stops all its processes after `--timeout` with the logs of
both, so that a process left waiting in a collective fails the test
instead of hanging it. The test runs in the JAX job only.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_capsules
from keras_capsules.testing import TestCase
from tests.experiments.experiments_test import load_experiment

_SCRIPT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    "experiments",
    "multi_process.py",
)
# One network: each launch of two processes costs seconds of start-up and
# compiling per network.
_MODELS = ("capsnet",)
# Two epochs of two steps at a global batch of 16 (8 per process), with
# plain SGD: its update is linear in the gradient, so the runs differ only
# in the order of the float32 sums of the all-reduce.
_FLAGS = (
    "--steps",
    "2",
    "--epochs",
    "2",
    "--batch-size",
    "16",
    "--learning-rate",
    "0.1",
)
# The runs differ in the order of float32 sums: the all-reduce adds the
# two halves' gradients that one process sums at once. After four steps
# the largest weight difference measured was 3e-5 of the largest weight
# update for CapsNet (outside CI: 1.0e-4 for EfficientCapsNet, whose
# batch-norm statistics are all-reduced too, 2e-7 for MatrixCapsNet); a
# run on one process's half alone differed by 0.06 to 2.5 of the update,
# so the bound tells a job that did not sum the two halves' gradients from
# one that did. The Stacked Capsule Autoencoder runs the same way outside
# CI (docs/data_parallel.md).
_RELATIVE_WEIGHT_TOLERANCE = 1e-3
_TIMEOUT = 300


def _launch(output_dir, *flags):
    """Runs the two-process job; returns process 0's JSON summary and the
    `.npz` reports of both processes."""
    result = subprocess.run(
        [
            sys.executable,
            _SCRIPT,
            "--processes",
            "2",
            "--threads",
            "1",
            "--timeout",
            str(_TIMEOUT),
            "--output-dir",
            output_dir,
            *_FLAGS,
            *flags,
        ],
        env=dict(
            os.environ,
            KERAS_BACKEND="jax",
            TF_CPP_MIN_LOG_LEVEL="3",
            # As in the test process (conftest.py): these networks draw no
            # random numbers inside their steps, and the initialisers'
            # random kernels compile in a fraction of the time.
            JAX_THREEFRY_PARTITIONABLE="0",
        ),
        capture_output=True,
        text=True,
        # The launcher stops its processes after _TIMEOUT; this is a
        # safety net above it.
        timeout=_TIMEOUT + 60,
    )
    if result.returncode != 0:
        raise AssertionError(
            "multi_process.py --processes 2 failed:\n"
            f"{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
        )
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    reports = [
        dict(np.load(os.path.join(output_dir, f"process_{i}.npz")))
        for i in range(2)
    ]
    return summary, reports


def _weights(report, model, key):
    count = sum(k.startswith(f"{model}/{key}/") for k in report)
    return [report[f"{model}/{key}/{i}"] for i in range(count)]


def _max_difference(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


@pytest.mark.skipif(
    keras.backend.backend() != "jax",
    reason="Keras's multi-process engine is keras.distribution on JAX; "
    "the JAX job runs this.",
)
class TwoProcessTest(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.experiment = load_experiment("multi_process")

    def test_two_processes_train_as_one_and_resume_as_one(self):
        # One test, so that the first job is also the uninterrupted run
        # that the resumed one must equal: each job costs seconds of
        # start-up and compiling.
        temp = self.get_temp_dir()
        first = self.check_job(
            os.path.join(temp, "whole"), "--models", *_MODELS
        )
        self.check_resumed_run(temp, _weights(first, "capsnet", "final"))

    def check_job(self, output_dir, *flags):
        """Runs the two-process job with `_FLAGS` and `flags` and checks
        every model of it; returns process 0's report."""
        summary, (first, second) = _launch(output_dir, *flags)
        self.assertEqual(summary["processes"], 2)
        args = self.experiment.parse_args([*_FLAGS, *flags])
        self.check_processes_agree(first, second)
        self.check_one_process_agrees(first, args)
        self.check_preset(output_dir, first, args.models)
        return first

    def check_processes_agree(self, first, second):
        self.assertEqual(sorted(first), sorted(second))
        for key in first:
            np.testing.assert_array_equal(
                first[key], second[key], err_msg=f"processes differ: {key}"
            )

    def check_one_process_agrees(self, report, args):
        for model in args.models:
            with self.subTest(model=model):
                initial = _weights(report, model, "initial")
                final = _weights(report, model, "final")
                # The same global batches in one process, from the same
                # weights.
                _, whole = self.experiment.train(model, args, 1, 0, initial)
                update = _max_difference(final, initial)
                self.assertGreater(update, 1e-6, "training changed nothing")
                tolerance = _RELATIVE_WEIGHT_TOLERANCE * update
                self.assertLessEqual(
                    _max_difference(final, whole["final"]), tolerance
                )
                self.assertAllClose(
                    report[f"{model}/loss"], whole["loss"], rtol=1e-5, atol=0
                )

    def check_preset(self, output_dir, report, models):
        # Process 0 alone wrote each preset, with the final weights.
        for model in models:
            preset = keras_capsules.models.from_preset(
                os.path.join(output_dir, f"{model}_preset")
            )
            final = _weights(report, model, "final")
            self.assertLen(preset.get_weights(), len(final))
            for saved, trained in zip(preset.get_weights(), final):
                np.testing.assert_array_equal(saved, trained)

    def check_resumed_run(self, temp, uninterrupted):
        backup = os.path.join(temp, "backup")
        flags = ("--models", "capsnet", "--backup-dir", backup)
        summary, cut = _launch(
            os.path.join(temp, "cut"), *flags, "--interrupt-at-epoch", "1"
        )
        self.assertTrue(summary["models"]["capsnet"]["interrupted"])
        # Each process backs up in its own folder.
        self.assertEqual(sorted(os.listdir(backup)), ["process_0", "process_1"])
        # The interrupted run trained epoch 0 only.
        self.assertGreater(
            _max_difference(
                _weights(cut[0], "capsnet", "final"), uninterrupted
            ),
            0,
        )
        _, resumed = _launch(os.path.join(temp, "resumed"), *flags)
        for process in resumed:
            self.assertFalse(process["capsnet/interrupted"])
            for got, expected in zip(
                _weights(process, "capsnet", "final"), uninterrupted
            ):
                np.testing.assert_array_equal(got, expected)
