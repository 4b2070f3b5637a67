"""Shared test case for keras_capsules, built on the public Keras API only.

Every layer test goes through `TestCase.run_layer_test`, which checks in one
place what each public object promises: its config round-trips, it builds from
a shape, it runs symbolically and eagerly with the advertised output shape, it
trains for a step inside `model.fit`, and it survives `.keras` saving.
"""

import os
import shutil
import tempfile

import keras
import numpy as np
from absl.testing import parameterized
from keras import ops


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _is_shape(x):
    return isinstance(x, tuple) and all(
        d is None or isinstance(d, int) for d in x
    )


def _is_repeated_int(stored, value):
    """Whether `stored` is a tuple or list of the int `value` repeated."""
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return (
        isinstance(stored, (tuple, list))
        and len(stored) > 0
        and all(
            isinstance(v, int) and not isinstance(v, bool) and v == value
            for v in stored
        )
    )


def _shapes(structure):
    """Flattens a shape, or a list, tuple or dict of shapes (sorted by key,
    as `keras.tree.flatten` orders a dict) into a list of tuples."""
    if _is_shape(structure):
        return [structure]
    if isinstance(structure, dict):
        structure = [structure[key] for key in sorted(structure)]
    return [tuple(s) for s in structure]


class TestCase(parameterized.TestCase):
    """Base class for keras_capsules tests."""

    def setUp(self):
        super().setUp()
        # Without the full garbage collection that `free_memory=True` adds:
        # with a framework loaded it takes about 0.3 s, which every test
        # paid; Python's own collector still frees the old models.
        keras.utils.clear_session(free_memory=False)
        keras.utils.set_random_seed(1337)

    def get_temp_dir(self):
        temp_dir = tempfile.mkdtemp()
        self.addCleanup(_rmtree, temp_dir)
        return temp_dir

    def assertAllClose(self, x1, x2, atol=1e-6, rtol=1e-6, msg=None):
        flat_1, flat_2 = keras.tree.flatten(x1), keras.tree.flatten(x2)
        for a, b in zip(flat_1, flat_2, strict=True):
            np.testing.assert_allclose(
                _to_numpy(a),
                _to_numpy(b),
                atol=atol,
                rtol=rtol,
                err_msg=msg or "",
            )

    def assertAllFinite(self, x, msg=None):
        for a in keras.tree.flatten(x):
            value = _to_numpy(a)
            self.assertTrue(
                np.all(np.isfinite(value)),
                msg or f"non-finite values: {value}",
            )

    def assertShapeEqual(self, actual, expected):
        self.assertEqual(tuple(actual), tuple(expected))

    def run_layer_test(
        self,
        layer_cls,
        init_kwargs,
        input_shape=None,
        input_data=None,
        expected_output_shape=None,
        expected_num_trainable_weights=None,
        expected_num_non_trainable_weights=0,
        expected_num_params=None,
        run_training_check=True,
        run_saving_check=True,
    ):
        """Runs the standard checks on a layer.

        Args:
            layer_cls: The layer class to test.
            init_kwargs: Dict of constructor arguments.
            input_shape: A shape tuple, or a list of them for layers that
                take several inputs as a list, or a tuple of them for
                layers that take several positional arguments, including
                the batch dimension.
            input_data: Optional array (or list, or tuple, of arrays) to
                call the layer on. Generated from `input_shape` when
                omitted.
            expected_output_shape: The output shape (or list, or dict of
                shapes), including the batch dimension. Outputs without the
                batch dimension (a learned constant) are left out of the
                training check.
            expected_num_trainable_weights: Number of trainable weights.
            expected_num_non_trainable_weights: Number of non-trainable
                weights.
            expected_num_params: Optional total number of scalar parameters.
            run_training_check: Whether to fit a one-layer model for a step.
            run_saving_check: Whether to save and reload a `.keras` model.
        """
        if input_shape is None and input_data is None:
            raise ValueError(
                "Provide `input_shape` or `input_data`. Received: "
                "input_shape=None, input_data=None"
            )
        if input_data is None:
            input_data = self._random_inputs(input_shape)
        if input_shape is None:
            input_shape = keras.tree.map_structure(
                lambda x: tuple(x.shape), input_data
            )
        multi_input = not _is_shape(input_shape)
        positional = multi_input and isinstance(input_shape, tuple)

        def apply(function, inputs):
            """`function` on the inputs as the layer takes them."""
            if positional:
                return function(*inputs)
            return function(list(inputs) if multi_input else inputs)

        self._check_config(layer_cls, init_kwargs)

        # Build from a shape, count weights.
        layer = layer_cls(**init_kwargs)
        apply(layer.build, input_shape)
        self.assertTrue(layer.built)
        if expected_num_trainable_weights is not None:
            self.assertLen(
                layer.trainable_weights, expected_num_trainable_weights
            )
        if expected_num_non_trainable_weights is not None:
            self.assertLen(
                layer.non_trainable_weights,
                expected_num_non_trainable_weights,
            )
        if expected_num_params is not None:
            self.assertEqual(layer.count_params(), expected_num_params)
        for weight in layer.weights:
            self.assertTrue(weight.name, "every weight must be named")

        if expected_output_shape is not None:
            computed = apply(layer.compute_output_shape, input_shape)
            self._assert_shapes(computed, expected_output_shape)

        # Symbolic call on keras.Input (unknown batch size).
        inputs = [
            keras.Input(shape=s[1:], batch_size=None)
            for s in _shapes(input_shape)
        ]
        symbolic_in = inputs if multi_input else inputs[0]
        if positional:
            symbolic_in = tuple(inputs)
        symbolic_out = apply(layer_cls(**init_kwargs), symbolic_in)
        if expected_output_shape is not None:
            self._assert_shapes(
                [
                    (None,) + tuple(t.shape[1:])
                    for t in keras.tree.flatten(symbolic_out)
                ],
                [
                    (None,) + tuple(s[1:])
                    for s in _shapes(expected_output_shape)
                ],
            )

        # Eager call.
        eager_layer = layer_cls(**init_kwargs)
        eager_out = apply(eager_layer, input_data)
        if expected_output_shape is not None:
            self._assert_shapes(
                [tuple(o.shape) for o in keras.tree.flatten(eager_out)],
                expected_output_shape,
            )
        self.assertAllFinite(eager_out)

        if run_training_check or run_saving_check:
            model = keras.Model(
                list(symbolic_in) if positional else symbolic_in,
                apply(layer_cls(**init_kwargs), symbolic_in),
            )
            if positional:
                input_data = list(input_data)
        if run_training_check:
            self._run_fit_step(model, input_data)
        if run_saving_check:
            self.run_model_saving_test(model, input_data, layer_cls=layer_cls)
        return eager_out

    def run_loss_test(self, loss, y_true, y_pred, expected=None, atol=1e-6):
        """Checks a `keras.losses.Loss` instance end to end.

        Config and serialization round-trip, value (when `expected` is
        given), and a compiled model using the loss saved and reloaded.
        """
        config = loss.get_config()
        revived = loss.__class__.from_config(config)
        self.assertEqual(revived.get_config(), config)
        serialized = keras.saving.serialize_keras_object(loss)
        deserialized = keras.saving.deserialize_keras_object(serialized)
        self.assertIsInstance(deserialized, loss.__class__)
        self.assertEqual(deserialized.get_config(), config)
        value = loss(y_true, y_pred)
        self.assertAllFinite(value)
        if expected is not None:
            self.assertAllClose(value, expected, atol=atol, rtol=atol)
        self.assertAllClose(revived(y_true, y_pred), value, atol=atol)

        num_features = int(np.prod(np.shape(y_pred)[1:]))
        y_true = np.asarray(y_true, dtype="float32")
        inputs = keras.Input(shape=(num_features,))
        outputs = keras.layers.Reshape(np.shape(y_pred)[1:])(
            keras.layers.Dense(num_features, activation="sigmoid")(inputs)
        )
        model = keras.Model(inputs, outputs)
        model.compile(optimizer="sgd", loss=loss)
        x = np.random.rand(len(y_true), num_features).astype("float32")
        model.fit(x, y_true, batch_size=len(y_true), epochs=1, verbose=0)
        path = os.path.join(self.get_temp_dir(), "model.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
        self.assertIsInstance(loaded.loss, loss.__class__)
        self.assertAllClose(
            loaded.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-5
        )
        return value

    def run_model_saving_test(
        self, model, input_data, layer_cls=None, atol=1e-5
    ):
        """Saves `model` to `.keras`, reloads it, compares predictions."""
        expected = model.predict(input_data, verbose=0)
        path = os.path.join(self.get_temp_dir(), "model.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
        self.assertIs(type(loaded), type(model))
        if layer_cls is not None:
            self.assertTrue(
                any(isinstance(lyr, layer_cls) for lyr in loaded.layers),
                f"no {layer_cls.__name__} in the reloaded model",
            )
        self.assertAllClose(
            loaded.predict(input_data, verbose=0),
            expected,
            atol=atol,
            rtol=atol,
        )
        return loaded

    # Internals -------------------------------------------------------------

    def _check_config(self, layer_cls, init_kwargs):
        layer = layer_cls(**init_kwargs)
        config = layer.get_config()
        for key, value in init_kwargs.items():
            self.assertIn(key, config, f"get_config() misses `{key}`")
            if isinstance(value, (int, float, str, bool, tuple, type(None))):
                got = config[key]
                if isinstance(value, tuple) and isinstance(got, list):
                    got = tuple(got)
                if _is_repeated_int(got, value):
                    # As Keras Conv2D does, a layer may store
                    # `kernel_size=3` as `(3, 3)`.
                    got = value
                self.assertEqual(got, value, f"config[{key!r}]")
        revived = layer_cls.from_config(config)
        self.assertEqual(revived.get_config(), config)
        serialized = keras.saving.serialize_keras_object(layer)
        deserialized = keras.saving.deserialize_keras_object(serialized)
        self.assertIsInstance(deserialized, layer_cls)
        self.assertEqual(deserialized.get_config(), config)

    def _assert_shapes(self, actual, expected):
        actual = (
            _shapes(actual)
            if not isinstance(actual, list)
            else [tuple(a) for a in actual]
        )
        expected = _shapes(expected)
        self.assertEqual(len(actual), len(expected))
        for a, e in zip(actual, expected):
            self.assertEqual(tuple(a), tuple(e))

    def _random_inputs(self, input_shape):
        rng = np.random.default_rng(0)
        arrays = [
            rng.standard_normal(s).astype("float32")
            for s in _shapes(input_shape)
        ]
        return arrays if not _is_shape(input_shape) else arrays[0]

    def _run_fit_step(self, model, input_data):
        batch = len(keras.tree.flatten(input_data)[0])
        # Outputs with the batch dimension (not a learned constant).
        kept = [
            o for o in keras.tree.flatten(model.outputs) if o.shape[0] is None
        ]
        if isinstance(model.output, dict) or len(kept) != len(model.outputs):
            model = keras.Model(
                model.inputs, kept if len(kept) > 1 else kept[0]
            )
        outputs = kept
        predictions = _as_list(model.predict(input_data, verbose=0))
        self.assertEqual(len(predictions[0]), batch)
        targets = [np.zeros_like(p) for p in predictions]
        model.compile(
            optimizer=keras.optimizers.SGD(0.01),
            loss=["mse"] * len(outputs) if len(outputs) > 1 else "mse",
        )
        history = model.fit(
            input_data,
            targets if len(outputs) > 1 else targets[0],
            batch_size=len(predictions[0]),
            epochs=1,
            verbose=0,
        )
        self.assertTrue(np.isfinite(history.history["loss"][-1]))
        return history


def _to_numpy(x):
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (int, float, list, tuple)):
        return np.asarray(x)
    return ops.convert_to_numpy(x)


def _rmtree(path):
    shutil.rmtree(path, ignore_errors=True)
