"""Data-parallel training of the capsule networks on two logical CPU devices.

Each case runs `experiments/data_parallel.py` in a fresh interpreter,
since the devices must be set up before the framework starts. `--check`
(TensorFlow's MirroredStrategy) trains the same initial weights on the
same batches once on two devices and once on one; `--collectives` (JAX)
reads the optimized HLO of the compiled train, evaluate and predict steps
of every network and runs the same training comparison at its first
batch. Both print a JSON report. The TensorFlow cases run only in the
TensorFlow job and the JAX case only in the JAX job, so that CI runs each
once.
"""

import json
import os
import subprocess
import sys

import keras
import pytest
from absl.testing import parameterized

from keras_capsules.testing import TestCase

_ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
_SCRIPT = os.path.join(_ROOT, "experiments", "data_parallel.py")
_STEPS = 3
# The collectives check trains two steps: EfficientCapsNet, whose batch
# normalisation sees 4 images per device there, drifted from one device by
# 2.4e-7, 4.8e-7 and 5.2e-6 after one, two and three steps, with updates
# of 1.4e-3 to 2.0e-3 (float32 rounding; the losses agreed to 1e-7), above
# the tolerance below at the third step.
_COLLECTIVES_STEPS = 2
_MODELS = (("capsnet", "capsnet"), ("matrix_capsnet", "matrix_capsnet"))

# The two runs differ only in the order of float32 sums: the all-reduce
# adds the gradients of the two half batches, the single device sums the
# whole batch at once. That is a few ulps (1e-7 relative) per step; after
# three steps the largest weight difference measured was 3e-5 of the
# largest weight update on JAX (1e-7 on TensorFlow). The bound leaves a
# factor of 30 above that, yet a replica that counts a loss term twice (as
# CapsNet's reconstruction loss once did under MirroredStrategy) moves some
# weights twice as far, a difference of the order of the update itself.
_RELATIVE_WEIGHT_TOLERANCE = 1e-3
_ABSOLUTE_WEIGHT_TOLERANCE = 1e-5
# The losses agreed to 1e-6 relative; the double-counted reconstruction
# loss added 10 %.
_LOSS_RTOL = 1e-5


def _assert_matches_single_device(test, report, name):
    """The losses and weights of a data-parallel run in `report` equal
    those of the single device up to float32 rounding, and training moved
    the weights."""
    test.assertAllFinite(report["loss"])
    test.assertAllClose(
        report["loss"], report["single_device_loss"], rtol=_LOSS_RTOL, atol=0
    )
    update = report["max_weight_update"]
    test.assertGreater(update, 1e-6, f"{name}: training left the weights alone")
    tolerance = min(
        _ABSOLUTE_WEIGHT_TOLERANCE, _RELATIVE_WEIGHT_TOLERANCE * update
    )
    test.assertLessEqual(report["max_weight_diff"], tolerance, name)


def _run(backend, model, *flags):
    return _script(
        backend,
        "--model",
        model,
        "--steps",
        str(_STEPS),
        "--batch-size",
        "8",
        *flags,
    )


def _script(backend, *flags):
    return subprocess.run(
        [
            sys.executable,
            _SCRIPT,
            "--cpu-devices",
            "2",
            "--preset",
            "tiny",
            *flags,
        ],
        cwd=_ROOT,
        env=dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2"),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _assert_trains_as_one_device(test, report, name, steps):
    """`report` holds `steps` steps on two replicas that stayed identical
    and match single-device training; MatrixCapsNet's scheduled margin
    reached every replica."""
    test.assertTrue(
        report["replicas_identical"],
        f"{name}: replicas differ: {report['unsynced_variables']}",
    )
    test.assertEqual(report["steps"], steps)
    test.assertLen(report["loss"], steps)
    _assert_matches_single_device(test, report, name)
    if name == "matrix_capsnet":
        # The scheduler ramps the margin over the run, assigning the
        # mirrored (or replicated) variable between steps.
        margins = report["spread_margin"]
        test.assertLen(margins, steps)
        test.assertAllClose(margins[0], 0.2)
        test.assertGreater(margins[-1], margins[0])
    else:
        test.assertNotIn("spread_margin", report)


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="tf.distribute.MirroredStrategy runs in the TensorFlow job only.",
)
class MirroredStrategyTest(TestCase):
    @parameterized.named_parameters(*_MODELS)
    def test_matches_single_device(self, model):
        result = _run("tensorflow", model, "--check")
        self.assertEqual(
            result.returncode,
            0,
            f"data_parallel.py --check failed:\n{result.stdout[-3000:]}\n"
            f"{result.stderr[-5000:]}",
        )
        report = json.loads(result.stdout.strip().splitlines()[-1])

        self.assertEqual(report["backend"], "tensorflow")
        self.assertEqual(report["model"], model)
        self.assertEqual(report["replicas"], 2)
        self.assertLen(report["devices"], 2)
        self.assertEqual(report["single_device_replicas"], 1)
        _assert_trains_as_one_device(self, report, model, _STEPS)


@pytest.mark.skipif(
    keras.backend.backend() != "jax",
    reason="keras.distribution.DataParallel runs in the JAX job only.",
)
class JAXCollectivesTest(TestCase):
    """The compiled data-parallel steps communicate only all-reduces.

    A reshape that merges the batch axis behind another axis, or a gather
    from a table of the whole batch, makes XLA's partitioner gather the
    global batch onto every device (the EM convolutional layers held six
    such all-gathers, the SCAE's template sampler three).

    The train step, which holds the forward pass, is compiled at global
    batches 8 and 16 and must send the same bytes at both; the evaluate
    and predict steps at 8 only (`--train-steps-only-after-first`), where
    any collective but an all-reduce fails the test as in the train step.
    At batch 8 every network also trains `_COLLECTIVES_STEPS` steps on the
    two devices and on one, as MirroredStrategy's check on TensorFlow.
    """

    def test_steps_hold_only_batch_independent_all_reduces(self):
        models = ("capsnet", "efficient_capsnet", "matrix_capsnet")
        models += ("stacked_capsule_autoencoder",)
        result = _script(
            "jax",
            "--collectives",
            "--batch-sizes",
            "8",
            "16",
            "--train-steps-only-after-first",
            "--steps",
            str(_COLLECTIVES_STEPS),
            "--model",
            *models,
        )
        self.assertEqual(
            result.returncode,
            0,
            f"data_parallel.py --collectives failed:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}",
        )
        report = json.loads(result.stdout.strip().splitlines()[-1])
        self.assertLen(report["devices"], 2)
        self.assertEqual([m["model"] for m in report["models"]], list(models))
        compiled_at = {
            "train_step": [8, 16],
            "test_step": [8],
            "predict_step": [8],
        }
        for record in report["models"]:
            name = record["model"]
            by_batch = {
                b["global_batch"]: b["steps"] for b in record["batches"]
            }
            self.assertEqual(sorted(by_batch), [8, 16])
            self.assertEqual(sorted(by_batch[16]), ["train_step"], name)
            for step, batches in compiled_at.items():
                bytes_sent = {}
                for batch in batches:
                    steps = by_batch[batch]
                    self.assertIn(step, steps, f"{name}: {step} not compiled")
                    for module in steps[step]:
                        where = f"{name} {step} at batch {batch}"
                        kinds = set(module["collectives"]) - {"all-reduce"}
                        self.assertFalse(kinds, f"{where}: {kinds}")
                        # Each device receives half of the batch.
                        self.assertTrue(module["data_shapes"], where)
                        for shape in module["data_shapes"]:
                            self.assertEqual(shape[0], batch // 2, where)
                        bytes_sent.setdefault(batch, set()).add(module["bytes"])
                if step == "train_step":
                    self.assertEqual(
                        bytes_sent[8], bytes_sent[16], f"{name} {step}"
                    )
            # The train step sums the gradients: at least one all-reduce.
            self.assertGreaterEqual(
                by_batch[8]["train_step"][0]["collectives"].get(
                    "all-reduce", 0
                ),
                1,
            )

            _assert_trains_as_one_device(
                self, record["training"], name, _COLLECTIVES_STEPS
            )


@pytest.mark.skipif(
    keras.backend.backend() != "torch",
    reason="The refusal is checked in the PyTorch job only.",
)
class TorchDataParallelTest(TestCase):
    def test_refuses_with_a_clear_message(self):
        result = _run("torch", "capsnet", "--check")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn(
            "Data-parallel training is not supported on the torch backend",
            result.stderr,
        )
