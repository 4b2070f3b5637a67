import keras
import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules import ops as capsule_ops
from keras_capsules.ops import _tiles
from keras_capsules.ops._tiles import tiling
from keras_capsules.testing import TestCase
from tests import backend_marks
from tests import references

pytestmark = backend_marks.EAGER

_GRIDS = (
    # name, grid, kernel, strides, padding, trailing
    ("k3_s1_valid_poses", (5, 5), (3, 3), (1, 1), "valid", (2, 4, 4)),
    ("k3_s2_valid", (5, 5), (3, 3), (2, 2), "valid", (3,)),
    ("k3_s2_valid_uncovered", (6, 6), (3, 3), (2, 2), "valid", (2,)),
    ("k3_s2_same", (6, 5), (3, 3), (2, 2), "same", (2,)),
    ("k3_s1_same", (4, 4), (3, 3), (1, 1), "same", (2, 2, 2)),
    ("k2_s3_valid_gaps", (7, 6), (2, 2), (3, 3), "valid", (2,)),
    ("rectangular", (5, 6), (3, 2), (1, 2), "valid", (2,)),
    ("no_trailing_axes", (5, 5), (3, 3), (2, 2), "same", ()),
)


class ExtractCapsulePatchesTest(TestCase):
    @parameterized.named_parameters(*_GRIDS)
    # Two grids on every backend; the others, the same index arithmetic, on
    # the primary one.
    @pytest.mark.primary_backend(
        every_backend=("k3_s2_same", "k3_s1_valid_poses")
    )
    def test_extract_and_fold_match_loops(
        self, grid, kernel, strides, padding, trailing
    ):
        rng = np.random.default_rng(0)
        x = rng.normal(size=(2,) + grid + trailing).astype("float32")
        tiles = capsule_ops.extract_capsule_patches(x, kernel, strides, padding)
        expected = references.extract_patches(x, kernel, strides, padding)
        self.assertAllClose(tiles, expected, atol=0)

        patches = rng.normal(size=expected.shape).astype("float32")
        folded = {}
        for reduction in ("sum", "max"):
            folded[reduction] = capsule_ops.fold_capsule_patches(
                patches, grid, strides, padding, reduction
            )
            self.assertAllClose(
                folded[reduction],
                references.fold_patches(
                    patches, grid, strides, padding, reduction
                ),
                atol=1e-5,
                msg=reduction,
            )
        # The sum fold is the transpose (adjoint) of the extraction.
        self.assertAllClose(
            np.sum(expected * patches),
            np.sum(x * keras.ops.convert_to_numpy(folded["sum"])),
            atol=1e-3,
            rtol=1e-5,
        )

    @parameterized.named_parameters(*_GRIDS)
    # Two grids on every backend; the others, the same index arithmetic, on
    # the primary one.
    @pytest.mark.primary_backend(
        every_backend=("k3_s2_same", "k3_s1_valid_poses")
    )
    def test_tiling_by_slices_matches_loops(
        self, grid, kernel, strides, padding, trailing
    ):
        # The slice tiling of the overlapping EM normalisations takes one
        # channel axis.
        rng = np.random.default_rng(1)
        x = rng.normal(size=(2,) + grid + (3,)).astype("float32")
        geometry = tiling(x.shape[1:3], kernel, strides, padding)
        tiles = _tiles.tile_by_slices(x, geometry, _tiles.OFFSETS_LAST)
        self.assertAllClose(
            tiles,
            references.extract_patches(x, kernel, strides, padding),
            atol=0,
        )

    def test_integer_arguments_and_paper_grid(self):
        # ConvCaps1 of the paper: K=3, stride 2 on the 14x14 primary grid.
        x = np.zeros((1, 14, 14, 2, 4, 4), "float32")
        tiles = capsule_ops.extract_capsule_patches(x, 3, 2)
        self.assertShapeEqual(tiles.shape, (1, 6, 6, 3, 3, 2, 4, 4))

    def test_symbolic_unknown_batch(self):
        inputs = keras.Input((5, 5, 2, 4, 4))
        tiles = capsule_ops.extract_capsule_patches(inputs, 3, 2, "same")
        self.assertShapeEqual(tiles.shape, (None, 3, 3, 3, 3, 2, 4, 4))

    def test_errors(self):
        x = np.zeros((1, 2, 2, 3), "float32")
        with self.assertRaisesRegex(
            ValueError, r"leaves no output positions.*Received: kernel_size"
        ):
            capsule_ops.extract_capsule_patches(x, 3)
        with self.assertRaisesRegex(
            ValueError, r"padding must be .*Received: padding=full"
        ):
            capsule_ops.extract_capsule_patches(x, 1, padding="full")
        with self.assertRaisesRegex(
            ValueError, r"positive integer.*Received: strides=0"
        ):
            capsule_ops.extract_capsule_patches(x, 1, strides=0)
        with self.assertRaisesRegex(
            ValueError, r"rank >= 3.*Received: inputs.shape=\(3,\)"
        ):
            capsule_ops.extract_capsule_patches(np.zeros(3), 1)


class FoldCapsulePatchesTest(TestCase):
    def test_counts_windows_per_position(self):
        ones = np.ones((1, 2, 2, 3, 3, 1), "float32")
        counts = capsule_ops.fold_capsule_patches(ones, (5, 5), strides=2)
        expected = np.outer([1, 1, 2, 1, 1], [1, 1, 2, 1, 1])
        self.assertAllClose(counts[0, :, :, 0], expected, atol=0)

    def test_max_of_very_negative_values(self):
        patches = np.full((1, 2, 2, 2, 2, 1), -1e30, "float32")
        folded = capsule_ops.fold_capsule_patches(
            patches, (3, 3), reduction="max"
        )
        self.assertAllClose(folded, np.full((1, 3, 3, 1), -1e30), rtol=1e-6)

    def test_errors(self):
        patches = np.zeros((1, 2, 2, 3, 3, 1), "float32")
        with self.assertRaisesRegex(
            ValueError, r"does not match.*Received: patches.shape"
        ):
            capsule_ops.fold_capsule_patches(patches, (5, 5), strides=1)
        with self.assertRaisesRegex(
            ValueError, r"reduction must be .*Received: reduction=mean"
        ):
            capsule_ops.fold_capsule_patches(
                patches, (5, 5), 2, reduction="mean"
            )
        with self.assertRaisesRegex(
            ValueError, r"tuple of 2 positive integers.*Received: grid_size=5"
        ):
            capsule_ops.fold_capsule_patches(patches, 5, 2)


class CoordinateAdditionTest(TestCase):
    def test_coordinate_grid(self):
        grid = keras.ops.convert_to_numpy(capsule_ops.coordinate_grid(2, 4))
        self.assertShapeEqual(grid.shape, (2, 4, 2))
        self.assertAllClose(grid[:, 0, 0], np.array([0.25, 0.75]))
        self.assertAllClose(
            grid[0, :, 1], np.array([0.125, 0.375, 0.625, 0.875])
        )
        scaled = capsule_ops.coordinate_grid(2, 3, coordinate_scale=0.04)
        self.assertAllClose(
            keras.ops.convert_to_numpy(scaled)[1, 2],
            np.array([0.06, 0.1]),
            atol=1e-7,
        )

    @parameterized.named_parameters(
        ("official_normalised", "official", None),
        ("paper_normalised", "paper", None),
        ("official_scaled", "official", 0.08),
        ("paper_scaled", "paper", 0.08),
    )
    def test_matches_loops(self, placement, scale):
        votes = np.random.default_rng(3).normal(size=(2, 3, 4, 2, 5, 4, 4))
        votes = votes.astype("float32")
        result = capsule_ops.add_coordinates(
            votes, coordinate_placement=placement, coordinate_scale=scale
        )
        self.assertAllClose(
            result,
            references.add_coordinates(votes, placement, scale),
            atol=1e-6,
        )

    def test_placements_touch_different_elements(self):
        votes = np.zeros((1, 2, 2, 1, 4, 4), "float32")
        official = keras.ops.convert_to_numpy(
            capsule_ops.add_coordinates(votes, "official")
        )
        paper = keras.ops.convert_to_numpy(
            capsule_ops.add_coordinates(votes, coordinate_placement="paper")
        )
        changed = np.argwhere(official[0, 1, 1, 0] != 0).tolist()
        self.assertEqual(changed, [[0, 0], [0, 1]])
        changed = np.argwhere(paper[0, 1, 1, 0] != 0).tolist()
        self.assertEqual(changed, [[0, 3], [1, 3]])

    def test_keeps_half_precision(self):
        votes = np.zeros((1, 2, 2, 1, 4, 4), "float16")
        result = capsule_ops.add_coordinates(votes)
        self.assertEqual(
            keras.backend.standardize_dtype(result.dtype), "float16"
        )

    def test_errors(self):
        with self.assertRaisesRegex(
            ValueError,
            r"Argument coordinate_placement must be .*"
            r"Received: coordinate_placement=center$",
        ):
            capsule_ops.add_coordinates(
                np.zeros((1, 2, 2, 4, 4)), coordinate_placement="center"
            )
        with self.assertRaisesRegex(
            ValueError, r"no room.*coordinate_placement.*Received: votes.shape"
        ):
            capsule_ops.add_coordinates(np.zeros((1, 2, 2, 1, 1)))
        with self.assertRaisesRegex(
            ValueError, r"positive number.*Received: coordinate_scale=-1"
        ):
            capsule_ops.coordinate_grid(2, 2, coordinate_scale=-1)
        with self.assertRaisesRegex(
            ValueError, r"positive integer.*Received: height=0"
        ):
            capsule_ops.coordinate_grid(0, 2)
