import keras
import numpy as np
from absl.testing import parameterized

from keras_capsules.layers import Mask
from keras_capsules.testing import TestCase
from tests import backend_marks

pytestmark = backend_marks.EAGER


def _numpy_mask(capsules, labels=None, top_k=1):
    capsules = np.asarray(capsules, dtype="float64")
    if labels is None:
        lengths = np.linalg.norm(capsules, axis=-1)
        order = np.argsort(-lengths, axis=-1)[:, :top_k]
        labels = np.zeros(lengths.shape)
        np.put_along_axis(labels, order, 1.0, axis=-1)
    masked = capsules * np.asarray(labels, dtype="float64")[..., None]
    return masked.reshape(len(capsules), -1)


def _capsules(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


class MaskTest(TestCase):
    @parameterized.named_parameters(
        ("top_1", {}, (2, 10, 16), (2, 160)),
        ("top_2", {"top_k": 2}, (3, 5, 4), (3, 20)),
        ("single_capsule", {}, (2, 1, 3), (2, 3)),
    )
    @backend_marks.COMPILED
    def test_layer_basics_by_length(
        self, init_kwargs, input_shape, output_shape
    ):
        self.run_layer_test(
            Mask,
            init_kwargs,
            input_shape=input_shape,
            expected_output_shape=output_shape,
            expected_num_trainable_weights=0,
            # Nothing to train in a weightless layer (TensorFlow and torch
            # warn); training through it is tested separately.
            run_training_check=False,
        )

    @parameterized.named_parameters(
        ("one_hot", 10, 16, False), ("multi_hot", 5, 4, True)
    )
    @backend_marks.COMPILED
    def test_layer_basics_by_label(self, num_capsules, capsule_dim, multi):
        labels = np.eye(num_capsules, dtype="float32")[[1, 3]]
        if multi:
            labels[:, 0] = 1.0
        self.run_layer_test(
            Mask,
            {},
            input_data=[_capsules((2, num_capsules, capsule_dim)), labels],
            expected_output_shape=(2, num_capsules * capsule_dim),
            expected_num_trainable_weights=0,
            # Nothing to train in a weightless layer (TensorFlow and torch
            # warn); training through it is tested separately.
            run_training_check=False,
        )

    @parameterized.named_parameters(("top_1", 1), ("top_2", 2), ("top_3", 3))
    def test_by_length_matches_numpy(self, top_k):
        capsules = _capsules((4, 6, 3), seed=top_k)
        self.assertAllClose(
            Mask(top_k=top_k)(capsules),
            _numpy_mask(capsules, top_k=top_k),
        )

    def test_by_length_keeps_the_longest(self):
        capsules = np.zeros((1, 3, 2), dtype="float32")
        capsules[0, 0] = [0.5, 0.0]
        capsules[0, 1] = [0.0, 0.9]
        capsules[0, 2] = [-0.6, 0.0]
        expected = np.array([[0.0, 0.0, 0.0, 0.9, 0.0, 0.0]])
        self.assertAllClose(Mask()(capsules), expected)

    def test_by_label_matches_numpy(self):
        capsules = _capsules((3, 4, 5))
        labels = np.array(
            [[0, 1, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0]], dtype="float32"
        )
        self.assertAllClose(
            Mask()([capsules, labels]), _numpy_mask(capsules, labels)
        )

    def test_label_overrides_length(self):
        capsules = np.zeros((1, 2, 2), dtype="float32")
        capsules[0, 0] = [1.0, 1.0]
        capsules[0, 1] = [0.1, 0.0]
        labels = np.array([[0.0, 1.0]], dtype="float32")
        self.assertAllClose(
            Mask()([capsules, labels]), np.array([[0.0, 0.0, 0.1, 0.0]])
        )

    def test_zero_and_large_capsules(self):
        capsules = np.zeros((2, 3, 4), dtype="float32")
        capsules[1] = 1e4
        out = Mask(top_k=2)(capsules)
        self.assertAllFinite(out)
        self.assertEqual(
            int(np.sum(keras.ops.convert_to_numpy(out)[1] != 0)), 8
        )

    @parameterized.named_parameters(
        ("float16", "mixed_float16"), ("bfloat16", "mixed_bfloat16")
    )
    def test_mixed_precision(self, policy):
        original = keras.config.dtype_policy()
        keras.config.set_dtype_policy(policy)
        self.addCleanup(keras.config.set_dtype_policy, original)
        # Squared lengths of 1e3 overflow float16; ranking must not.
        capsules = np.full((2, 3, 4), 1e3, dtype="float32")
        capsules[:, 1] *= 2.0
        layer = Mask()
        out = layer(capsules)
        self.assertEqual(
            keras.backend.standardize_dtype(out.dtype), layer.compute_dtype
        )
        self.assertAllFinite(out)
        self.assertAllClose(
            np.asarray(keras.ops.convert_to_numpy(out), "float32"),
            _numpy_mask(capsules),
            rtol=1e-2,
        )

    def test_top_k_type_error(self):
        with self.assertRaisesRegex(
            TypeError, r"top_k must be an integer\. Received: top_k='1'"
        ):
            Mask(top_k="1")

    def test_top_k_not_positive(self):
        with self.assertRaisesRegex(
            ValueError, r"positive integer\. Received: top_k=0"
        ):
            Mask(top_k=0)

    def test_top_k_larger_than_num_capsules(self):
        with self.assertRaisesRegex(
            ValueError, r"at most num_capsules \(3\).*Received: top_k=4"
        ):
            Mask(top_k=4).build((2, 3, 8))

    @parameterized.named_parameters(
        ("wrong_num_classes", (None, 5)),
        ("wrong_rank", (None, 10, 1)),
        ("wrong_batch", (3, 10)),
    )
    def test_label_shape_mismatch(self, label_shape):
        with self.assertRaisesRegex(
            ValueError,
            r"labels of shape \(batch_size, num_capsules\) = "
            r"\(batch_size, 10\).*Received: input_shape=\[\(2, 10, 16\), "
            + r"\("
            + ", ".join(map(str, label_shape))
            + r"\)\]",
        ):
            Mask().build([(2, 10, 16), label_shape])

    def test_label_shape_mismatch_symbolic(self):
        capsules = keras.Input(shape=(10, 16))
        labels = keras.Input(shape=(4,))
        with self.assertRaisesRegex(ValueError, "Received: input_shape="):
            Mask()([capsules, labels])

    def test_capsule_rank_rejected(self):
        with self.assertRaisesRegex(
            ValueError,
            r"capsules of shape \(batch_size, num_capsules, capsule_dim\)\. "
            r"Received: input_shape=\(2, 10\)",
        ):
            Mask().build((2, 10))

    @parameterized.named_parameters(("by_length", False), ("by_label", True))
    @backend_marks.COMPILED
    def test_trains_through_mask(self, use_labels):
        # Dense -> capsules -> Mask -> Dense, fitted under the backend's
        # default compilation (XLA on JAX): gradients reach the first Dense
        # through the kept capsules only.
        images = keras.Input(shape=(6,))
        capsules = keras.layers.Reshape((3, 4))(keras.layers.Dense(12)(images))
        inputs = [images]
        if use_labels:
            labels = keras.Input(shape=(3,))
            inputs.append(labels)
            masked = Mask()([capsules, labels])
        else:
            masked = Mask(top_k=2)(capsules)
        model = keras.Model(inputs, keras.layers.Dense(2)(masked))
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        x = [np.random.default_rng(0).normal(size=(4, 6)).astype("float32")]
        if use_labels:
            x.append(np.eye(3, dtype="float32")[[0, 1, 2, 0]])
        first_kernel = keras.ops.convert_to_numpy(model.weights[0]).copy()
        model.fit(x, np.ones((4, 2), "float32"), epochs=1, verbose=0)
        self.assertAllFinite(model.weights)
        self.assertFalse(
            np.allclose(
                first_kernel, keras.ops.convert_to_numpy(model.weights[0])
            )
        )

    def test_a_built_layer_checks_the_labels_of_every_call(self):
        layer = Mask()
        capsules = np.ones((2, 10, 16), "float32")
        layer([capsules, np.eye(10, dtype="float32")[[1, 2]]])
        with self.assertRaisesRegex(
            ValueError,
            r"labels of shape \(batch_size, num_capsules\) = "
            r"\(batch_size, 10\).*Received: input_shape=\[\(2, 10, 16\), "
            r"\(2, 5\)\]",
        ):
            layer([capsules, np.eye(5, dtype="float32")[[1, 2]]])
