"""The model base of `CapsNet`, `EfficientCapsNet`, `MatrixCapsNet` and
`StackedCapsuleAutoencoder`: `compile()` with `"auto"` defaults, its
restoring from a `.keras` file, and presets."""

import types

import keras

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_int
from keras_capsules._validation import check_option
from keras_capsules.models import _presets as presets
from keras_capsules.models._images import mask_non_finite
from keras_capsules.models._images import standardize as standardize_images
from keras_capsules.ops._backend import resolve_jit_compile
from keras_capsules.ops._backend import retraces_variable_creation


def is_auto(value):
    # `value == "auto"` would compare optimizers and losses by `__eq__`.
    return isinstance(value, str) and value == "auto"


def length_aware_rate(
    total_steps, start, decay_start, decay_rate, decay_steps, hold=0.0
):
    """The learning rate of a default optimizer: `start` held for the first
    `hold` fraction of `total_steps`, then decayed to zero by a cosine over
    the rest; or without a length (`None`) `decay_start` multiplied by
    `decay_rate` every `decay_steps`, continuously.

    Raises:
        ValueError: If `total_steps` is neither `None` nor a positive int.
    """
    total_steps = check_int(
        total_steps, "total_steps", minimum=1, allow_none=True
    )
    schedules = keras.optimizers.schedules
    if total_steps is None:
        return schedules.ExponentialDecay(
            decay_start, decay_steps=decay_steps, decay_rate=decay_rate
        )
    if not hold:
        return schedules.CosineDecay(start, total_steps)
    # A warm-up from `start` to `start` holds the rate; one step at least
    # is left to the cosine.
    held = min(round(hold * total_steps), total_steps - 1)
    return schedules.CosineDecay(
        start,
        total_steps - held,
        warmup_target=start,
        warmup_steps=held,
    )


class _ClassProperty:
    """A read-only attribute computed from the class it is read on."""

    def __init__(self, getter):
        self.getter = getter
        self.__doc__ = getter.__doc__

    def __get__(self, instance, owner):
        return self.getter(owner)


def _list_presets(cls):
    """Read-only `{name: metadata}` of every preset `from_preset` accepts:
    the class's architectures (`"trained": False`, their `description`
    and `config`) and its trained presets shipped with the package
    (`"trained": True` and the metadata they were saved with)."""
    listing = {
        name: {
            "class_name": cls.__name__,
            "trained": False,
            "description": architecture["description"],
            "config": dict(architecture["config"]),
        }
        for name, architecture in cls._architectures.items()
    }
    listing.update(presets.list_all(cls.__name__))
    return types.MappingProxyType(
        {name: types.MappingProxyType(entry) for name, entry in listing.items()}
    )


class CapsuleModel(keras.Model):
    """The functional model base of every model of the package: presets
    (`presets`, `from_preset`, `save_to_preset`), `compile()` with
    `"auto"` defaults and its restoring from a `.keras` file, the image
    rules in `call`, and `from_config`.

    Subclasses build their graph in `__init__`, name their architectures
    in the class statement (`class M(CapsuleModel, architectures={name:
    {"description": ..., "config": {argument: value}}})`) and implement
    `default_optimizer(total_steps=None)` and `default_loss()`;
    `default_metrics()` is the accuracy of the argmax unless overridden.
    """

    _architectures = types.MappingProxyType({})

    def __init_subclass__(cls, architectures=None, **kwargs):
        super().__init_subclass__(**kwargs)
        if architectures is not None:
            cls._architectures = types.MappingProxyType(dict(architectures))

    presets = _ClassProperty(_list_presets)

    @classmethod
    def from_preset(cls, preset, load_weights=True, **kwargs):
        """Builds a model from a preset: a trained network or an
        architecture.

        A preset is one of:

        - a name in the class's `presets`: a trained network shipped with
          the package (its weights load offline) or an architecture (the
          network with freshly initialized weights);
        - a path to a preset directory written by `save_to_preset`.

        A trained preset is a starting point for other classes or images:
        with arguments that change the shape of some weights
        (`num_classes=5`, `image_shape=...`), each layer whose weights
        all keep their shapes takes the trained ones, and the others start
        from their initializers. With `num_classes`, the class capsules
        are new (CapsNet's and EfficientCapsNet's `digit_caps` and their
        decoder's first dense layer, which reads the class capsules;
        MatrixCapsNet's `class_caps`); the convolutions, the primary
        capsules, MatrixCapsNet's convolutional capsules and the rest of
        the decoder are kept. Arguments that change no shape (`name=`)
        load the weights as they are.

        Args:
            preset: A preset name or a path to a preset directory.
            load_weights: Whether to load the weights of a trained preset
                (`False` builds its network untrained). Defaults to `True`.
            **kwargs: Any other constructor argument; those given here
                override the preset's.

        Returns:
            An uncompiled model of this class.

        Raises:
            ValueError: If `preset` is none of the above, a trained preset
                of another class, or a directory whose `config.json`,
                `metadata.json` or `model.weights.h5` is damaged or
                belongs to another network (the message names the file).
            FileNotFoundError: If a preset directory lacks its weights
                file and `load_weights=True`.
        """
        check_bool(load_weights, "load_weights")
        directory = presets.resolve_directory(preset)
        if directory is not None:
            return presets.load(cls, directory, load_weights, kwargs)
        check_option(preset, "preset", tuple(cls.presets))
        config = cls._architectures[preset]["config"]
        return cls(**{**config, **kwargs})

    def save_to_preset(
        self, preset_dir, metadata=None, weights_dtype="float32"
    ):
        """Saves the network and its weights as a preset directory.

        `from_preset(preset_dir)` loads it back, on any backend. The
        directory holds `config.json`, `model.weights.h5` (the model's
        weights only, no optimizer state) and `metadata.json`; the
        metadata records the parameter count, the image shape and pixel
        range the model takes, the backend, the versions, the date and the
        machine's CPU, and any field of `metadata` (for a trained network:
        the data, its accuracy, the training command).

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
        total_steps=None,
        **kwargs,
    ):
        """Configures the model for training, with the model's defaults.

        On TensorFlow the optimizer's variables are created here, for the
        model's trainable variables, where Keras would create them inside
        the first training step: TensorFlow then traces that step once
        instead of twice.

        Args:
            optimizer: An optimizer, or `"auto"` for the one
                `default_optimizer(total_steps)` returns. Defaults to
                `"auto"`.
            loss: A loss on the model's output, or `"auto"` for the one
                `default_loss()` returns. Defaults to `"auto"`.
            metrics: A list of metrics, or `"auto"` for those
                `default_metrics()` returns. Defaults to `"auto"`.
            jit_compile: Boolean or `"auto"`. `"auto"` compiles the train
                step with XLA on TensorFlow and JAX, which Keras' own
                `"auto"` does not do for TensorFlow on a machine without
                a GPU, and leaves PyTorch eager, as Keras does
                (docs/performance.md). Defaults to `"auto"`.
            total_steps: Optional positive integer, the training steps of
                the run, for a default optimizer whose schedule spans the
                run (see `default_optimizer`). Only with
                `optimizer="auto"`. Defaults to `None`.
            **kwargs: Other arguments of `keras.Model.compile`.

        Raises:
            ValueError: If `total_steps` is not a positive integer or is
                given with an optimizer.
        """
        total_steps = check_int(
            total_steps, "total_steps", minimum=1, allow_none=True
        )
        jit_compile = resolve_jit_compile(
            self, jit_compile, kwargs.get("run_eagerly")
        )
        if is_auto(optimizer):
            optimizer = self.default_optimizer(total_steps)
        elif total_steps is not None:
            if not isinstance(optimizer, str):
                optimizer = type(optimizer).__name__
            raise ValueError(
                "Argument total_steps sets the schedule of the default "
                'optimizer (optimizer="auto"); an optimizer passed in '
                "keeps its own. Received: "
                f"optimizer={optimizer}, "
                f"total_steps={total_steps}"
            )
        if is_auto(loss):
            loss = self.default_loss()
        if is_auto(metrics):
            metrics = self.default_metrics()
        super().compile(
            optimizer=optimizer,
            loss=loss,
            metrics=metrics,
            jit_compile=jit_compile,
            **kwargs,
        )
        # CapsNet's first `fit` on TensorFlow took 13.6 s with two traces,
        # 6.9 s with one. JAX and PyTorch keep Keras' order, which creates
        # the optimizer's variables at the start of `fit`, under its
        # distribution.
        if retraces_variable_creation():
            self._build_optimizer()

    def _build_optimizer(self):
        optimizer = self.optimizer
        if self.built and optimizer is not None and not optimizer.built:
            optimizer.build(self.trainable_variables)

    def default_optimizer(self, total_steps=None):
        """The optimizer of `compile(optimizer="auto")`."""
        raise NotImplementedError

    def default_loss(self):
        """The loss of `compile(loss="auto")`."""
        raise NotImplementedError

    def default_metrics(self):
        """The metrics of `compile(metrics="auto")`: the accuracy of the
        argmax, `[keras.metrics.CategoricalAccuracy(name="accuracy")]`."""
        return [keras.metrics.CategoricalAccuracy(name="accuracy")]

    def compile_from_config(self, config):
        # Keras skips recompiling models that override `compile`, so the
        # saved optimizer, loss and metrics are restored here.
        config = keras.saving.deserialize_keras_object(config)
        # The backend that loads the model picks its own default.
        config.pop("jit_compile", None)
        self.compile(**config)
        self._build_optimizer()

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # `call` checks the images. Keras's own check of the input spec
        # fails with an unhelpful error on a tensor of unknown rank, which
        # TensorFlow traces after images of another rank.
        self.input_spec = None

    def call(self, inputs, training=None, mask=None):
        # Before `Functional.call`, which casts the inputs to the float
        # dtype of the graph's `Input` (see `_images`).
        images = standardize_images(
            inputs, self.image_shape, type(self).__name__
        )
        outputs = super().call(images, training=training, mask=mask)
        return mask_non_finite(images, outputs)
