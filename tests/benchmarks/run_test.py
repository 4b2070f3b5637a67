"""The command line, runner and report of `benchmarks.run`.

No test here measures speed: the rows are checked for their fields, and
the ratios and the table are computed from made-up rows.
"""

import os
import tempfile

import keras
import numpy as np

from benchmarks import models
from benchmarks import official_codes
from benchmarks import report
from benchmarks import run
from benchmarks import runner
from keras_capsules.testing import TestCase
from tests import backend_marks

# The benchmark runner's command line and records.
pytestmark = backend_marks.RUN_ONCE

_MEASURED = (
    "compile_seconds",
    "step_seconds",
    "train_images_per_second",
    "train_step_seconds_all",
    "predict_compile_seconds",
    "predict_seconds",
    "inference_images_per_second",
    "predict_seconds_all",
    "peak_rss_mib",
    "baseline_rss_mib",
    "rss_growth_mib",
    "device_peak_mib",
    "jit_compile",
    "num_params",
)


def _row(variant, batch_size, step_seconds, peak_rss_mib):
    return {
        "model": "em_conv_caps",
        "variant": variant,
        "impl": variant,
        "batch_size": batch_size,
        "routing_iterations": 3,
        "jit_compile": True,
        "step_seconds": step_seconds,
        "train_images_per_second": batch_size / step_seconds,
        "predict_seconds": step_seconds / 4,
        "inference_images_per_second": 4 * batch_size / step_seconds,
        "compile_seconds": 10.0,
        "peak_rss_mib": peak_rss_mib,
        "rss_growth_mib": peak_rss_mib / 2,
        "device_peak_mib": None,
        "num_params": 1234,
    }


class ParseArgsTest(TestCase):
    def test_defaults_depend_on_the_model(self):
        args = run.parse_args(["--model", "matrix_capsnet"])
        self.assertEqual(args.impl, "both")
        self.assertEqual(args.batch, [32])
        self.assertEqual(args.image_size, 32)
        args = run.parse_args(["--model", "capsnet"])
        self.assertEqual(args.impl, "ours")
        self.assertEqual(args.batch, [100])
        self.assertEqual(args.image_size, 28)
        self.assertIsNone(args.jit)

    def test_rejects_inconsistent_flags(self):
        for argv in (
            ["--model", "capsnet", "--impl", "naive"],
            ["--model", "capsnet", "--baseline-model", "capsnet"],
            ["--model", "em_conv_caps", "--baseline-model", "dense_caps"],
            ["--steps", "0"],
            ["--batch", "0,2"],
            ["--repeats", "0"],
            ["--model", "em_conv_caps", "--official-checkout", "x"],
            ["--model", "matrix_capsnet", "--impl", "both"]
            + ["--official-checkout", "x"],
        ):
            with self.assertRaises(SystemExit, msg=argv):
                run.parse_args(argv)


class PointsTest(TestCase):
    def test_ours_and_naive_alternate(self):
        args = run.parse_args(
            ["--model", "em_conv_caps", "--batch", "1,2", "--iterations", "3"]
        )
        self.assertEqual(
            [(p["impl"], p["batch_size"]) for p in run.points(args)],
            [("ours", 1), ("naive", 1), ("ours", 2), ("naive", 2)],
        )

    def test_baseline_model_alternates_under_its_name(self):
        args = run.parse_args(
            [
                "--model",
                "efficient_capsnet",
                "--baseline-model",
                "capsnet",
                "--image-size",
                "32",
            ]
        )
        points = run.points(args)
        self.assertEqual(
            [(p["model"], p["variant"], p["image_size"]) for p in points],
            [("efficient_capsnet", "ours", 32), ("capsnet", "capsnet", 28)],
        )
        self.assertEqual({p["config"] for p in points}, {None})

    def test_official_code_alternates_on_the_same_batch(self):
        args = run.parse_args(
            ["--model", "matrix_capsnet", "--preset", "small", "--batch", "2"]
            + ["--image-size", "17", "--repeats", "2"]
            + ["--official-checkout", "checkout", "--official-python", "py"]
        )
        self.assertEqual(args.impl, "ours")
        points = run.points(args)
        self.assertEqual(
            [(p["impl"], p["repeat"]) for p in points],
            [("ours", 0), ("official", 0), ("ours", 1), ("official", 1)],
        )
        official = points[1]
        self.assertEqual(official["official_python"], "py")
        self.assertTrue(os.path.isabs(official["official_checkout"]))
        self.assertEqual(
            official["official_architecture"],
            {"A": 64, "B": 8, "C": 16, "D": 16},
        )
        self.assertEqual(
            runner.child_command(official, "out.json")[:2],
            [
                "py",
                os.path.join(runner.ROOT, "benchmarks", "official_codes.py"),
            ],
        )
        with tempfile.TemporaryDirectory() as tmp:
            run.write_official_inputs(points, tmp)
            self.assertNotIn("inputs_path", points[0])
            self.assertEqual(points[1]["inputs_path"], points[3]["inputs_path"])
            written = np.load(official["inputs_path"])
            # The batch the `ours` point trains on: drawn first from its seed.
            _, x, y = models.build(
                points[0], np.random.default_rng(points[0]["seed"])
            )
            np.testing.assert_array_equal(written["x"], x)
            np.testing.assert_array_equal(written["y"], y)
            self.assertEqual(written["x"].shape, (2, 17, 17, 1))

    def test_official_flags_name_the_architecture(self):
        flags = official_codes.em_flags(
            {"A": 64, "B": 8, "C": 16, "D": 24}, 4, 2
        )
        for flag in (
            "--num_start_conv=64",
            "--num_prime_capsules=8",
            "--caps_dims=16,24",
            "--batch_size=4",
            "--routing_iteration=2",
            "--caps_strides=2,1",
        ):
            self.assertIn(flag, flags)


class ReportTest(TestCase):
    def test_ratios_pair_the_rows_of_one_batch(self):
        rows = [
            _row("ours", 8, 1.0, 100.0),
            _row("naive", 8, 4.0, 400.0),
            _row("ours", 16, 2.0, 100.0),
            {**_row("naive", 16, 1.0, 1.0), "error": "killed"},
        ]
        (ratio,) = report.compute_ratios(rows)
        self.assertEqual(ratio["batch_size"], 8)
        self.assertAllClose(ratio["train_time_ratio"], 0.25)
        self.assertAllClose(ratio["train_throughput_ratio"], 4.0)
        self.assertAllClose(ratio["peak_rss_ratio"], 0.25)
        self.assertAllClose(ratio["compile_time_ratio"], 1.0)
        self.assertIsNone(ratio["device_peak_ratio"])

    def test_ratios_take_the_median_of_repeats(self):
        rows = [
            _row("ours", 8, 1.0, 100.0),
            _row("official", 8, 4.0, 400.0),
            _row("ours", 8, 3.0, 100.0),
            _row("official", 8, 8.0, 400.0),
            _row("ours", 8, 2.0, 100.0),
            _row("official", 8, 5.0, 400.0),
        ]
        (ratio,) = report.compute_ratios(rows, "official")
        self.assertAllClose(ratio["train_time_ratio"], 2.0 / 5.0)
        self.assertAllClose(ratio["peak_rss_ratio"], 0.25)

    def test_table_shows_rows_failures_and_ratios(self):
        rows = [
            _row("ours", 8, 1.0, 100.0),
            _row("naive", 8, 4.0, 400.0),
            {**_row("naive", 16, 1.0, 1.0), "error": "timed out after 9 s"},
        ]
        result = {
            "environment": {"backend": "jax", "device": "cpu"},
            "model": "em_conv_caps",
            "config": "small",
            "steps": 3,
            "warmup": 1,
            "baseline": "naive",
            "rows": rows,
            "ratios": report.compute_ratios(rows),
        }
        lines = report.format_table(result).splitlines()
        self.assertIn("em_conv_caps (small), backend jax", lines[0])
        self.assertIn("FAILED: timed out after 9 s", lines[4])
        self.assertTrue(lines[5].startswith("ours/naive"))
        self.assertEqual(lines[-1].split()[:4], ["8", "3", "0.250", "4.000"])


class RunnerTest(TestCase):
    def test_measure_point_fills_every_field(self):
        args = run.parse_args(
            [
                "--model",
                "dense_caps",
                "--batch",
                "2",
                "--iterations",
                "1",
                "--steps",
                "1",
                "--warmup",
                "1",
            ]
        )
        (spec,) = run.points(args)
        row = runner.measure_point(spec)
        for key in _MEASURED:
            self.assertIn(key, row)
        self.assertEqual(row["num_params"], 1152 * 10 * 8 * 16)
        self.assertEqual(row["jit_compile"], keras.backend.backend() != "torch")
        self.assertEqual(len(row["train_step_seconds_all"]), 1)
        self.assertTrue(np.isfinite(row["train_images_per_second"]))

    def test_failed_point_is_recorded(self):
        spec = {"model": "no_such_model", "impl": "ours", "seed": 0}
        spec.update(jit=False, batch_size=1, routing_iterations=1)
        row = runner.run_point(spec, timeout=600)
        self.assertTrue(row["error"].startswith("KeyError"), row["error"])
        self.assertIn("traceback", row)
        self.assertEqual(row["environment"]["backend"], keras.backend.backend())
