"""The model base of `CapsNet`, `EfficientCapsNet` and `MatrixCapsNet`:
`compile()` with `"auto"` defaults, its restoring from a `.keras` file, and
named presets."""

import inspect
import math
import types

import keras

from keras_capsules._validation import check_option
from keras_capsules.models import _presets as presets
from keras_capsules.ops._backend import resolve_jit_compile


def read_only_presets(presets):
    """`{name: {argument: value}}` as a read-only mapping of mappings."""
    return types.MappingProxyType(
        {
            name: types.MappingProxyType(dict(arguments))
            for name, arguments in presets.items()
        }
    )


_FIT_SIGNATURE = inspect.signature(keras.Model.fit)


def steps_per_epoch(arguments):
    """The training steps of an epoch of `fit(**arguments)`, or `None`
    when they cannot be known before training."""
    if arguments.get("steps_per_epoch") is not None:
        return arguments["steps_per_epoch"]
    x = arguments.get("x")
    leaves = keras.tree.flatten(x) if x is not None else []
    if leaves and all(hasattr(leaf, "shape") for leaf in leaves):
        num_samples = int(leaves[0].shape[0])
        # Keras holds out the last `validation_split` of the samples.
        split = arguments.get("validation_split") or 0.0
        if split:
            num_samples = int(math.floor(num_samples * (1.0 - split)))
        return math.ceil(num_samples / (arguments.get("batch_size") or 32))
    if isinstance(x, keras.utils.PyDataset):
        return x.num_batches
    try:
        # Any other object of finite length, such as a `tf.data.Dataset`.
        return len(x) or None
    except TypeError:
        return None


def is_auto(value):
    # `value == "auto"` would compare optimizers and losses by `__eq__`.
    return isinstance(value, str) and value == "auto"


class CapsuleModel(keras.Model):
    """A functional model with `compile()` defaults and named presets.

    Subclasses build their graph in `__init__`, set `presets` (with
    `read_only_presets`) and implement `default_optimizer()` and
    `default_loss()`; `default_metrics()` is the accuracy of the argmax
    unless overridden. A default optimizer whose schedule decays over the
    whole run calls `size_on_first_fit`: the first `fit` after compiling
    with it sets the schedule's `decay_steps` to the run's length.
    """

    # Read-only: preset name -> the constructor arguments it sets.
    presets = read_only_presets({})

    @classmethod
    def from_preset(cls, preset, load_weights=True, **kwargs):
        """Builds a model from a preset: a trained network or an
        architecture.

        A preset is one of:

        - the name of a trained preset shipped with the package (see
          `keras_capsules.models.list_presets()`): the network and its
          weights, loaded offline;
        - a path to a preset directory written by `save_to_preset`;
        - the name of an architecture in the class's `presets`: the
          network with freshly initialized weights.

        Args:
            preset: A preset name or a path to a preset directory.
            load_weights: Whether to load the weights of a trained preset
                (`False` builds its network untrained). Defaults to `True`.
            **kwargs: Any other constructor argument; those given here
                override the preset's.

        Returns:
            An uncompiled model of this class.

        Raises:
            ValueError: If `preset` is none of the above, or a trained
                preset of another class.
        """
        if not isinstance(load_weights, bool):
            raise TypeError(
                "Argument load_weights must be a bool. "
                f"Received: load_weights={load_weights!r}"
            )
        directory = presets.resolve_directory(preset)
        if directory is not None:
            return presets.load(cls, directory, load_weights, kwargs)
        return cls(**{**cls.preset_config(preset), **kwargs})

    @classmethod
    def preset_config(cls, preset):
        """The constructor arguments of a named preset, a dict."""
        trained = tuple(presets.list_all(cls.__name__))
        check_option(preset, "preset", tuple(cls.presets) + trained)
        if preset in trained:
            directory = presets.resolve_directory(preset)
            return dict(presets.read_config(directory)["config"])
        return dict(cls.presets[preset])

    def save_to_preset(
        self, preset_dir, metadata=None, weights_dtype="float32"
    ):
        """Saves the network and its weights as a preset directory.

        `from_preset(preset_dir)` loads it back, on any backend. The
        directory holds `config.json`, `model.weights.h5` and
        `metadata.json`; the metadata records the parameter count, the
        backend, the versions, the date and the machine's CPU, and any
        field of `metadata` (for a trained network: the data, its
        accuracy, the training command).

        Args:
            preset_dir: Path of the directory to write (created if
                needed; its preset files are overwritten).
            metadata: Optional dict of JSON values to record, overriding
                the fields above of the same name. Defaults to `None`.
            weights_dtype: `"float32"`, or `"float16"` to store the
                weights in half the space; they are loaded back into the
                model's float32 variables. Defaults to `"float32"`.

        Raises:
            TypeError: If `preset_dir` is not a path or `metadata` is not
                a dict of JSON values.
            ValueError: If `weights_dtype` is not one of the above.
        """
        presets.save(self, preset_dir, metadata, weights_dtype)

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        *,
        metrics="auto",
        jit_compile="auto",
        **kwargs,
    ):
        """Configures the model for training, with the model's defaults.

        Args:
            optimizer: An optimizer, or `"auto"` for the one
                `default_optimizer()` returns. Defaults to `"auto"`.
            loss: A loss on the model's output, or `"auto"` for the one
                `default_loss()` returns. Defaults to `"auto"`.
            metrics: A list of metrics, or `"auto"` for those
                `default_metrics()` returns. Defaults to `"auto"`.
            jit_compile: Boolean or `"auto"`. `"auto"` compiles the train
                step with XLA on TensorFlow and JAX, which Keras' own
                `"auto"` does not do for TensorFlow on a machine without
                a GPU, and leaves PyTorch eager, as Keras does
                (docs/performance.md). Defaults to `"auto"`.
            **kwargs: Other arguments of `keras.Model.compile`.
        """
        jit_compile = resolve_jit_compile(
            self, jit_compile, kwargs.get("run_eagerly")
        )
        if is_auto(optimizer):
            optimizer = self.default_optimizer()
        if is_auto(loss):
            loss = self.default_loss()
        if is_auto(metrics):
            metrics = self.default_metrics()
        unsized = getattr(self, "_unsized_schedule", None)
        if unsized is not None and optimizer is not unsized["optimizer"]:
            self._unsized_schedule = None
        super().compile(
            optimizer=optimizer,
            loss=loss,
            metrics=metrics,
            jit_compile=jit_compile,
            **kwargs,
        )

    def default_optimizer(self):
        """The optimizer of `compile(optimizer="auto")`."""
        raise NotImplementedError

    def default_loss(self):
        """The loss of `compile(loss="auto")`."""
        raise NotImplementedError

    def default_metrics(self):
        """The metrics of `compile(metrics="auto")`: the accuracy of the
        argmax, `[keras.metrics.CategoricalAccuracy(name="accuracy")]`."""
        return [keras.metrics.CategoricalAccuracy(name="accuracy")]

    def size_on_first_fit(self, optimizer, schedule, compile_arguments):
        """Makes the first `fit` with `optimizer` size `schedule`.

        That `fit` sets `schedule.decay_steps` to its `(epochs -
        initial_epoch) * steps_per_epoch` before its first step, and
        raises a `ValueError` if the steps of an epoch cannot be counted
        from its arguments; so does `train_on_batch` before it. Compiling
        with another optimizer cancels this.

        Args:
            optimizer: The optimizer that `default_optimizer` returns.
            schedule: Its learning-rate schedule, with a `decay_steps`.
            compile_arguments: Dict, the arguments of `compile` that make
                this optimizer again, for a model saved before its first
                `fit`.
        """
        self._unsized_schedule = {
            "optimizer": optimizer,
            "schedule": schedule,
            "compile_arguments": compile_arguments,
        }

    def fit(self, *args, **kwargs):
        unsized = getattr(self, "_unsized_schedule", None)
        if unsized is not None:
            arguments = _FIT_SIGNATURE.bind(self, *args, **kwargs).arguments
            steps = steps_per_epoch(arguments)
            if steps is None:
                raise _unsized_error(arguments.get("x"))
            epochs = arguments.get("epochs", 1)
            remaining = (epochs - arguments.get("initial_epoch", 0)) * steps
            # The schedule reads the optimizer's step, which a restored
            # optimizer state starts past zero.
            done = int(keras.ops.convert_to_numpy(self.optimizer.iterations))
            # Read when the train step is traced, which `fit` does next.
            unsized["schedule"].decay_steps = max(1, done + remaining)
            self._unsized_schedule = None
        return super().fit(*args, **kwargs)

    fit.__doc__ = keras.Model.fit.__doc__

    def train_on_batch(self, *args, **kwargs):
        if getattr(self, "_unsized_schedule", None) is not None:
            x = args[0] if args else kwargs.get("x")
            raise ValueError(
                "The learning-rate schedule of compile() decays over the "
                "whole run, and train_on_batch does not say how long the "
                "run is. Pass total_steps= to compile(), or train with "
                f"fit(). Received: x={type(x).__name__}"
            )
        return super().train_on_batch(*args, **kwargs)

    train_on_batch.__doc__ = keras.Model.train_on_batch.__doc__

    def get_compile_config(self):
        config = super().get_compile_config()
        unsized = getattr(self, "_unsized_schedule", None)
        if self.compiled and config is not None and unsized is not None:
            # Compiled but not trained yet: the reloaded model takes the
            # length of its own first `fit`.
            config = {
                **config,
                "optimizer": "auto",
                **unsized["compile_arguments"],
            }
        return config

    def compile_from_config(self, config):
        # Keras skips recompiling models that override `compile`, so the
        # saved optimizer, loss and metrics are restored here.
        config = keras.saving.deserialize_keras_object(config)
        # The backend that loads the model picks its own default.
        config.pop("jit_compile", None)
        self.compile(**config)
        if self.built:
            self.optimizer.build(self.trainable_variables)

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _unsized_error(x):
    return ValueError(
        "The learning-rate schedule of compile() decays over the whole "
        "run, whose length cannot be counted from this data before "
        "training. Pass total_steps= to compile() or steps_per_epoch= to "
        f"fit(). Received: x={type(x).__name__}"
    )
