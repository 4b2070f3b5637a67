"""CapsNet: the three-layer capsule network of Sabour et al. (2017)."""

import math

import keras
from keras import ops

from keras_capsules._validation import check_image_shape
from keras_capsules._validation import check_non_negative_number
from keras_capsules._validation import check_positive_int
from keras_capsules.layers.dense_caps import DenseCaps
from keras_capsules.layers.length import Length
from keras_capsules.layers.mask import Mask
from keras_capsules.layers.primary_caps import PrimaryCaps
from keras_capsules.losses.margin_loss import MarginLoss
from keras_capsules.metrics.top_k_exact_match import TopKExactMatch
from keras_capsules.ops._backend import resolve_jit_compile


def _check_decoder_units(decoder_units):
    if decoder_units is None:
        return None
    valid = isinstance(decoder_units, (tuple, list)) and all(
        isinstance(u, int) and not isinstance(u, bool) and u > 0
        for u in decoder_units
    )
    if not valid:
        raise ValueError(
            "Argument decoder_units must be None (no decoder) or a tuple of "
            "positive integers, the hidden layer sizes of the decoder. "
            f"Received: decoder_units={decoder_units!r}"
        )
    return tuple(decoder_units)


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsNet(keras.Model):
    """The CapsNet of "Dynamic Routing Between Capsules".

    A 256-filter 9x9 ReLU convolution (Conv1) feeds a convolutional capsule
    layer (`PrimaryCaps`, 32 types of 8D capsules, 9x9 kernel, stride 2),
    whose 1152 capsules are routed by agreement into one 16D capsule per
    class (DigitCaps, a `DenseCaps` layer). The model's output is the length
    of each class capsule (`Length`), a score in `[0, 1)` per class:
    `predict(x)` returns shape `(batch_size, num_classes)` and the class is
    its argmax.

    A decoder of three dense layers (512 and 1024 ReLU units, then one
    sigmoid unit per pixel) reconstructs the input from the class capsules
    with all but one masked out (`Mask`): the capsule of the true label
    during training and evaluation, the longest one in `reconstruct(x)`.
    Its loss, `reconstruction_weight` times the per-image sum of squared
    errors, is added to the compiled loss (the margin loss, Eq. 4) as a
    regulariser, and logged as `reconstruction_loss`.

    `fit(x, y)` takes one-hot labels `y` and needs no second input: the
    graph of the model maps images to lengths, and `compute_loss` runs the
    encoder again on `x`, takes the compiled loss on the lengths of these
    capsules and feeds the decoder the capsules selected by `y`. Both
    losses thus share one backward pass through the encoder, and the
    forward pass that made `y_pred` serves only the metrics. Under XLA
    (JAX, and TensorFlow with `jit_compile=True`) that forward pass is the
    same computation on the same operands as the repeated one and is merged
    by common-subexpression elimination: the compiled JAX training step
    holds as many convolutions with the decoder as without it. On PyTorch,
    and on TensorFlow without XLA, the encoder's forward pass runs twice
    per training step. In exchange, `fit`, `predict`, `evaluate` and
    `.keras` saving stay plain Keras on every backend.

    `compile()` without arguments uses the paper's setting: Adam with a
    learning rate of 1e-3 decayed by 0.96 every 2000 steps (continuously,
    as the official code), the margin loss, and the accuracy of the argmax.

    With the defaults, CapsNet has 8,215,568 parameters: 6,804,224 in the
    encoder (Conv1 20,992, PrimaryCaps 5,308,672, DigitCaps 1,474,560) and
    1,411,344 in the decoder.

    See Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules"
    (NeurIPS 2017), Section 4 and Fig. 1-2.

    Several objects per image (Sabour et al., section 6): with
    `num_objects=K > 1`, `fit` and `evaluate` take targets `y` as the dict
    that `datasets.multi_mnist` yields: `"labels"`, the K-hot labels of
    shape `(batch_size, num_classes)`, on which the margin loss and the
    metrics are taken; `"object_labels"`, the one-hot label of each object,
    shape `(batch_size, K, num_classes)`; and `"objects"`, each object
    alone, shape `(batch_size, K, height, width, channels)`. The decoder
    reconstructs each object from the class capsule of its label, and the
    reconstruction loss sums the squared errors of the K reconstructions.
    A model without decoder also takes the K-hot labels alone.
    `reconstruct(x)` then returns one image per object, decoded from each
    of the K longest capsules.

    Args:
        input_shape: Tuple of 3 integers, the `(height, width, channels)`
            of the images, channels last. Defaults to `(28, 28, 1)`.
        num_classes: Integer, the number of classes (class capsules).
            Defaults to `10`.
        routing_iterations: Integer, the routing iterations of DigitCaps.
            Defaults to `3`.
        conv_filters: Integer, the filters of Conv1. Defaults to `256`.
        conv_kernel_size: Integer, the kernel size of Conv1 (valid
            padding, stride 1). Defaults to `9`.
        num_primary_capsules: Integer, the capsule types of PrimaryCaps.
            Defaults to `32`.
        primary_capsule_dim: Integer, the dimension of the primary
            capsules. Defaults to `8`.
        primary_kernel_size: Integer, the kernel size of PrimaryCaps
            (valid padding). Defaults to `9`.
        primary_strides: Integer, the strides of PrimaryCaps. Defaults to
            `2`.
        capsule_dim: Integer, the dimension of the class capsules.
            Defaults to `16`.
        decoder_units: Tuple of integers, the hidden layer sizes of the
            reconstruction decoder, or `None` for a model without decoder
            and without reconstruction loss. Defaults to `(512, 1024)`.
        reconstruction_weight: Float, the weight of the reconstruction
            loss. Defaults to `0.0005`.
        num_objects: Integer, the number of objects (digits) in each
            image: `1` for MNIST, `2` for MultiMNIST. With more than one,
            the training targets are a dict (below), each object is
            reconstructed from its own class capsule, and the default
            metric counts a sample as right only when all its objects are
            recognised. Defaults to `1`.
        **kwargs: Keyword arguments of `keras.Model`, such as `name`.

    Call arguments:
        inputs: Images of shape `(batch_size, height, width, channels)`,
            with values in `[0, 1]` to match the sigmoid decoder.
        training: Python boolean, whether the call is in training mode.

    Returns:
        Class capsule lengths of shape `(batch_size, num_classes)`.

    Raises:
        TypeError: If a boolean or numeric argument has the wrong type.
        ValueError: If an argument is out of its documented range,
            or if the convolutions leave no spatial positions on
            `input_shape`.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> # CapsNet() is the paper's network; this one is smaller, to run fast.
    >>> model = keras_capsules.models.CapsNet(
    ...     conv_filters=32, num_primary_capsules=8, decoder_units=(64, 128)
    ... )
    >>> model.compile()  # Adam 1e-3 x0.96 / 2000 steps, MarginLoss, accuracy.
    >>> x = np.random.rand(8, 28, 28, 1).astype("float32")
    >>> y = np.eye(10, dtype="float32")[np.arange(8)]
    >>> history = model.fit(x, y, epochs=1, batch_size=4, verbose=0)
    >>> model.predict(x, verbose=0).shape  # capsule lengths
    (8, 10)
    >>> tuple(model.reconstruct(x).shape)  # by the predicted class
    (8, 28, 28, 1)

    Reference:
        - [Sabour et al., 2017](https://arxiv.org/abs/1710.09829)
        - [Official TensorFlow code](https://github.com/Sarasra/models/tree/
          master/research/capsules)
    """

    def __init__(
        self,
        input_shape=(28, 28, 1),
        num_classes=10,
        routing_iterations=3,
        conv_filters=256,
        conv_kernel_size=9,
        num_primary_capsules=32,
        primary_capsule_dim=8,
        primary_kernel_size=9,
        primary_strides=2,
        capsule_dim=16,
        decoder_units=(512, 1024),
        reconstruction_weight=0.0005,
        num_objects=1,
        **kwargs,
    ):
        input_shape = check_image_shape(input_shape)
        for name, value in (
            ("num_classes", num_classes),
            ("routing_iterations", routing_iterations),
            ("conv_filters", conv_filters),
            ("conv_kernel_size", conv_kernel_size),
            ("num_primary_capsules", num_primary_capsules),
            ("primary_capsule_dim", primary_capsule_dim),
            ("primary_kernel_size", primary_kernel_size),
            ("primary_strides", primary_strides),
            ("capsule_dim", capsule_dim),
            ("num_objects", num_objects),
        ):
            check_positive_int(value, name)
        if num_objects > num_classes:
            raise ValueError(
                "Argument num_objects must be at most num_classes "
                f"({num_classes}): the objects of an image are of different "
                f"classes. Received: num_objects={num_objects}"
            )
        decoder_units = _check_decoder_units(decoder_units)
        check_non_negative_number(
            reconstruction_weight, "reconstruction_weight"
        )
        conv_size = min(input_shape[:2]) - conv_kernel_size + 1
        primary_size = (conv_size - primary_kernel_size) // primary_strides
        if conv_size < 1 or primary_size < 0:
            raise ValueError(
                "The images are too small for the convolutions: Conv1 "
                f"({conv_kernel_size}x{conv_kernel_size}, valid) and "
                f"PrimaryCaps ({primary_kernel_size}x{primary_kernel_size}, "
                "valid) need height and width of at least "
                f"{conv_kernel_size + primary_kernel_size - 1}. Use smaller "
                f"kernel sizes. Received: input_shape={input_shape}"
            )

        # === Layers ===
        # Held in locals until the functional model exists: the PyTorch
        # backend cannot track sublayers assigned before `Model.__init__`,
        # and the decoder lies outside the functional graph, so it has to
        # be tracked as an attribute for its weights to train and save.
        conv1 = keras.layers.Conv2D(
            conv_filters,
            conv_kernel_size,
            activation="relu",
            name="conv1",
        )
        primary_caps = PrimaryCaps(
            num_capsules=num_primary_capsules,
            capsule_dim=primary_capsule_dim,
            kernel_size=primary_kernel_size,
            strides=primary_strides,
            name="primary_caps",
        )
        digit_caps = DenseCaps(
            num_capsules=num_classes,
            capsule_dim=capsule_dim,
            routing_iterations=routing_iterations,
            name="digit_caps",
        )
        length = Length(name="length")
        label_mask = prediction_mask = decoder = None
        if decoder_units is not None:
            # Two masks, since a layer instance fixes its input structure
            # when built; both are weightless.
            capsule_shape = (None, num_classes, capsule_dim)
            label_mask = Mask(name="label_mask")
            label_mask.build([capsule_shape, (None, num_classes)])
            prediction_mask = Mask(name="prediction_mask")
            prediction_mask.build(capsule_shape)
            decoder = keras.Sequential(
                [keras.Input(shape=(num_classes * capsule_dim,))]
                + [
                    keras.layers.Dense(
                        units, activation="relu", name=f"decoder_dense_{i}"
                    )
                    for i, units in enumerate(decoder_units)
                ]
                + [
                    keras.layers.Dense(
                        math.prod(input_shape),
                        activation="sigmoid",
                        name="decoder_output",
                    ),
                    keras.layers.Reshape(input_shape, name="decoder_reshape"),
                ],
                name="decoder",
            )

        # === Functional Model ===
        images = keras.Input(shape=input_shape, name="images")
        capsules = digit_caps(primary_caps(conv1(images)))
        lengths = length(capsules)
        super().__init__(inputs=images, outputs=lengths, **kwargs)
        self.conv1 = conv1
        self.primary_caps = primary_caps
        self.digit_caps = digit_caps
        self.length = length
        self.label_mask = label_mask
        self.prediction_mask = prediction_mask
        self.decoder = decoder
        self.reconstruction_loss_tracker = None
        if decoder is not None:
            self.reconstruction_loss_tracker = keras.metrics.Mean(
                name="reconstruction_loss"
            )

        # === Config ===
        self.num_classes = num_classes
        self.routing_iterations = routing_iterations
        self.conv_filters = conv_filters
        self.conv_kernel_size = conv_kernel_size
        self.num_primary_capsules = num_primary_capsules
        self.primary_capsule_dim = primary_capsule_dim
        self.primary_kernel_size = primary_kernel_size
        self.primary_strides = primary_strides
        self.capsule_dim = capsule_dim
        self.decoder_units = decoder_units
        self.reconstruction_weight = reconstruction_weight
        self.num_objects = num_objects
        # `input_shape` is a read-only property of functional models, equal
        # to `(None,) + input_shape`, so the argument is kept under a
        # private name.
        self._image_shape = input_shape

    def _encode(self, images, training=None):
        features = self.conv1(images, training=training)
        primary = self.primary_caps(features, training=training)
        return self.digit_caps(primary, training=training)

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        *,
        metrics="auto",
        jit_compile="auto",
        **kwargs,
    ):
        """Configures the model for training, with the paper's defaults.

        Args:
            optimizer: An optimizer, or `"auto"` for Adam with
                `keras.optimizers.schedules.ExponentialDecay(1e-3,
                decay_steps=2000, decay_rate=0.96)`. Defaults to `"auto"`.
            loss: A loss on the class capsule lengths, or `"auto"` for
                `keras_capsules.losses.MarginLoss()`. The reconstruction
                loss is added to it whenever the model has a decoder.
                Defaults to `"auto"`.
            metrics: A list of metrics, or `"auto"` for
                `[keras.metrics.CategoricalAccuracy(name="accuracy")]`,
                or with `num_objects > 1`
                `[keras_capsules.metrics.TopKExactMatch(num_objects,
                name="accuracy")]` (all objects right).
                Defaults to `"auto"`.
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
        if optimizer == "auto":
            optimizer = keras.optimizers.Adam(
                learning_rate=keras.optimizers.schedules.ExponentialDecay(
                    1e-3, decay_steps=2000, decay_rate=0.96
                )
            )
        if loss == "auto":
            loss = MarginLoss()
        if metrics == "auto":
            if self.num_objects == 1:
                metrics = [keras.metrics.CategoricalAccuracy(name="accuracy")]
            else:
                metrics = [TopKExactMatch(self.num_objects, name="accuracy")]
        super().compile(
            optimizer=optimizer,
            loss=loss,
            metrics=metrics,
            jit_compile=jit_compile,
            **kwargs,
        )

    def compile_from_config(self, config):
        # Keras skips recompiling models that override `compile`, so the
        # saved optimizer, loss and metrics are restored here.
        config = keras.saving.deserialize_keras_object(config)
        # The backend that loads the model picks its own default.
        config.pop("jit_compile", None)
        self.compile(**config)
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def compute_loss(
        self,
        x=None,
        y=None,
        y_pred=None,
        sample_weight=None,
        training=True,
    ):
        """Adds the reconstruction loss to the compiled loss.

        With a decoder and labels, the encoder is run on `x` here and the
        compiled loss is taken on the lengths of its capsules (equal to
        `y_pred`), so that one backward pass serves both losses. The
        decoder sees these capsules with all but those of the labels `y`
        masked out. The reconstruction loss is
        `reconstruction_weight` times the sum of squared pixel errors of
        each image, averaged over the batch (weighted by `sample_weight`,
        as the compiled loss). It is skipped when the model has no decoder
        or when no labels are given.

        With `num_objects > 1`, `y` is the dict of labels and objects
        described in the class docstring, and each object is reconstructed
        from the capsule of its own label.

        Args:
            x: Input images.
            y: One-hot (or multi-hot) labels of shape
                `(batch_size, num_classes)`, or with `num_objects > 1` the
                dict of `"labels"`, `"object_labels"` and `"objects"`.
            y_pred: Class capsule lengths returned by the model.
            sample_weight: Optional per-sample weights.
            training: Whether the model is training or evaluating.

        Returns:
            The total loss, a scalar.
        """
        labels, object_labels, objects = self._unpack_targets(y)
        if self.decoder is None or y is None:
            return super().compute_loss(
                x=x,
                y=labels,
                y_pred=y_pred,
                sample_weight=sample_weight,
                training=training,
            )
        capsules = self._encode(x, training=training)
        # The compiled loss is taken on the lengths of these capsules, equal
        # to `y_pred`, so that a single backward pass through the encoder
        # serves both losses; `y_pred` is left to the metrics.
        loss = super().compute_loss(
            x=x,
            y=labels,
            y_pred=self.length(capsules),
            sample_weight=sample_weight,
            training=training,
        )
        if object_labels is None:
            reconstruction = self._decode(capsules, labels, training)
            targets, num_images = x, 1
        else:
            reconstruction = self._decode(capsules, object_labels, training)
            targets, num_images = objects, self.num_objects
        num_pixels = num_images * math.prod(self._image_shape)
        # Squared errors in float32: their per-image sum reaches hundreds,
        # which float16 rounds coarsely. With several objects, the errors
        # of all the reconstructions of an image are summed.
        errors = ops.reshape(
            ops.square(
                ops.cast(reconstruction, "float32")
                - ops.cast(targets, "float32")
            ),
            (-1, num_pixels),
        )
        per_image = ops.sum(errors, axis=-1)
        if sample_weight is not None:
            per_image = per_image * ops.reshape(
                ops.cast(sample_weight, "float32"), (-1,)
            )
        reconstruction_loss = self.reconstruction_weight * ops.mean(per_image)
        self.reconstruction_loss_tracker.update_state(reconstruction_loss)
        # Under tf.distribute every replica returns the loss of its slice
        # of the batch and the gradients are summed over replicas, so Keras
        # divides the compiled loss (and `self.losses`) by the number of
        # replicas; the reconstruction loss needs the same scale. JAX and
        # PyTorch see the whole batch and have no such attribute.
        strategy = getattr(self, "distribute_strategy", None)
        num_replicas = getattr(strategy, "num_replicas_in_sync", 1)
        return ops.add(
            ops.cast(loss, "float32"), reconstruction_loss / num_replicas
        )

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        # With several objects, the metrics see the K-hot labels.
        labels = y["labels"] if isinstance(y, dict) else y
        return super().compute_metrics(x, labels, y_pred, sample_weight)

    def _unpack_targets(self, y):
        """Returns `(labels, object_labels, objects)` from the targets."""
        if not isinstance(y, dict):
            if (
                y is not None
                and self.num_objects > 1
                and self.decoder is not None
            ):
                raise ValueError(
                    f"A CapsNet with num_objects={self.num_objects} and a "
                    "decoder trains on targets given as a dict of "
                    '"labels", "object_labels" and "objects", as '
                    "`datasets.multi_mnist` yields them. Received: "
                    f"type(y)={type(y).__name__}"
                )
            return y, None, None
        needed = ["labels"]
        if self.num_objects > 1 and self.decoder is not None:
            needed += ["object_labels", "objects"]
        missing = [key for key in needed if key not in y]
        if missing:
            raise ValueError(
                f"The targets of a CapsNet with num_objects="
                f"{self.num_objects} lack {', '.join(missing)}. Received: "
                f"y.keys()={sorted(y)}"
            )
        if self.num_objects == 1:
            return y["labels"], None, None
        object_labels, objects = y.get("object_labels"), y.get("objects")
        expected = {
            "object_labels": (self.num_objects, self.num_classes),
            "objects": (self.num_objects,) + self._image_shape,
        }
        for key, value in (
            ("object_labels", object_labels),
            ("objects", objects),
        ):
            if value is None:
                continue
            shape = tuple(value.shape[1:])
            if len(shape) != len(expected[key]) or any(
                d is not None and d != e for d, e in zip(shape, expected[key])
            ):
                raise ValueError(
                    f'Target "{key}" of a CapsNet with num_objects='
                    f"{self.num_objects} must have shape (batch_size,) + "
                    f"{expected[key]}. Received: {key}.shape="
                    f"{tuple(value.shape)}"
                )
        return y["labels"], object_labels, objects

    def _decode(self, capsules, labels, training):
        """Decodes `capsules` masked by labels `(B, C)` or `(B, K, C)`."""
        labels = ops.cast(labels, capsules.dtype)
        if len(labels.shape) == 2:
            masked = self.label_mask([capsules, labels])
            return self.decoder(masked, training=training)
        num_objects = labels.shape[1]
        # Each object is decoded from its own copy of the capsules.
        repeated = ops.repeat(capsules, num_objects, axis=0)
        flat_labels = ops.reshape(labels, (-1, self.num_classes))
        masked = self.label_mask([repeated, flat_labels])
        images = self.decoder(masked, training=training)
        return ops.reshape(images, (-1, num_objects) + self._image_shape)

    def class_capsules(self, x):
        """Returns the class capsules of images `x`.

        Args:
            x: Images of shape `(batch_size, height, width, channels)`.

        Returns:
            A tensor of shape `(batch_size, num_classes, capsule_dim)`: the
            DigitCaps activity vectors, whose lengths `predict` returns.
        """
        return self._encode(x, training=False)

    def decode(self, capsules, y):
        """Reconstructs images from class capsules masked by labels.

        The decoder sees `capsules` with all but the capsules selected by
        `y` zeroed, as in training. Editing a capsule before decoding it
        shows what its dimensions encode (Fig. 4 of the paper).

        Args:
            capsules: Class capsules of shape
                `(batch_size, num_classes, capsule_dim)`, for example from
                `class_capsules`.
            y: One-hot (or multi-hot) labels of shape
                `(batch_size, num_classes)`, or one-hot labels of shape
                `(batch_size, K, num_classes)` for K images per sample,
                each decoded from the capsule of its own label.

        Returns:
            A tensor of images in `[0, 1]`, shape `(batch_size, height,
            width, channels)`, or `(batch_size, K, height, width,
            channels)` for labels of rank 3.

        Raises:
            ValueError: If the model was built without a decoder.
        """
        self._check_decoder()
        return self._decode(ops.convert_to_tensor(capsules), y, False)

    def _check_decoder(self):
        if self.decoder is None:
            raise ValueError(
                "This CapsNet has no decoder to reconstruct with. Build it "
                "with decoder_units set, e.g. (512, 1024). Received: "
                "decoder_units=None"
            )

    def reconstruct(self, x, y=None):
        """Reconstructs images from their class capsules.

        The decoder sees the class capsules of `x` with all but one masked
        out: the capsules selected by the labels `y` when given (for
        example to redraw an image as another class), otherwise the
        longest capsule, the predicted class. With `num_objects=K > 1` and
        no labels, each of the K longest capsules is decoded on its own,
        one image per object. The whole of `x` is processed in one call:
        pass batches of a size that fits in memory.

        Args:
            x: Images of shape `(batch_size, height, width, channels)`.
            y: Optional labels: one-hot (or multi-hot) of shape
                `(batch_size, num_classes)`, or one-hot of shape
                `(batch_size, K, num_classes)` for one image per label.
                Defaults to `None`.

        Returns:
            A tensor of reconstructed images in `[0, 1]`, shape
            `(batch_size, height, width, channels)`, or
            `(batch_size, K, height, width, channels)` for labels of rank 3
            or, without labels, when `num_objects=K > 1`.

        Raises:
            ValueError: If the model was built without a decoder.
        """
        self._check_decoder()
        capsules = self._encode(x, training=False)
        if y is not None:
            return self._decode(capsules, y, False)
        if self.num_objects == 1:
            return self.decoder(self.prediction_mask(capsules), training=False)
        # The K longest capsules, each as its own one-hot label.
        squared_lengths = ops.sum(
            ops.square(ops.cast(capsules, "float32")), axis=-1
        )
        _, indices = ops.top_k(squared_lengths, k=self.num_objects)
        return self._decode(
            capsules, ops.one_hot(indices, self.num_classes), False
        )

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "input_shape": self._image_shape,
            "num_classes": self.num_classes,
            "routing_iterations": self.routing_iterations,
            "conv_filters": self.conv_filters,
            "conv_kernel_size": self.conv_kernel_size,
            "num_primary_capsules": self.num_primary_capsules,
            "primary_capsule_dim": self.primary_capsule_dim,
            "primary_kernel_size": self.primary_kernel_size,
            "primary_strides": self.primary_strides,
            "capsule_dim": self.capsule_dim,
            "decoder_units": self.decoder_units,
            "reconstruction_weight": self.reconstruction_weight,
            "num_objects": self.num_objects,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
