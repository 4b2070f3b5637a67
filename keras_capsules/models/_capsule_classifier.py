"""The training and decoding shared by capsule classifiers with a
reconstruction decoder: `CapsNet` and `EfficientCapsNet`."""

import math

import keras
from keras import ops

from keras_capsules.layers.mask import Mask
from keras_capsules.losses.margin_loss import MarginLoss
from keras_capsules.metrics.top_k_exact_match import TopKExactMatch
from keras_capsules.models._base import CapsuleModel
from keras_capsules.models._images import standardize as standardize_images


class CapsuleClassifier(CapsuleModel):
    """A functional model from images to class capsule lengths, with an
    optional decoder outside its graph.

    Subclasses build their encoder, call `__init__` with the graph's
    inputs and outputs and the parts below, and implement
    `class_capsules(x, training=False)`. Their class attributes name the
    constructor argument that holds the decoder (`decoder_argument`, for
    error messages) and how the reconstruction errors of an image are
    reduced: `"sum"` over its pixels (Sabour et al.) or `"mean"`
    (Efficient-CapsNet), before `reconstruction_weight` scales them.
    """

    decoder_argument = "decoder"
    reconstruction_reduction = "sum"

    def __init__(
        self,
        inputs,
        outputs,
        *,
        length,
        decoder,
        num_classes,
        capsule_dim,
        num_objects,
        image_shape,
        reconstruction_weight,
        **kwargs,
    ):
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.length = length
        self.decoder = decoder
        self.label_mask = self.prediction_mask = None
        self.reconstruction_loss_tracker = None
        if decoder is not None:
            # Two masks, since a layer instance fixes its input structure
            # when built; both are weightless.
            capsule_shape = (None, num_classes, capsule_dim)
            self.label_mask = Mask(name="label_mask")
            self.label_mask.build([capsule_shape, (None, num_classes)])
            self.prediction_mask = Mask(name="prediction_mask")
            self.prediction_mask.build(capsule_shape)
            self.reconstruction_loss_tracker = keras.metrics.Mean(
                name="reconstruction_loss"
            )
        self.num_classes = num_classes
        self.capsule_dim = capsule_dim
        self.num_objects = num_objects
        self.reconstruction_weight = reconstruction_weight
        # `input_shape` is a read-only property of functional models, equal
        # to `(None,) + input_shape`.
        self.image_shape = image_shape

    def default_loss(self):
        """The loss of `compile(loss="auto")`:
        `keras_capsules.losses.MarginLoss()` on the class capsule lengths,
        to which the reconstruction loss is added whenever the model has a
        decoder."""
        return MarginLoss()

    def default_metrics(self):
        """The metrics of `compile(metrics="auto")`:
        `[keras.metrics.CategoricalAccuracy(name="accuracy")]`, or with
        `num_objects > 1` `[keras_capsules.metrics.TopKExactMatch(
        num_objects, name="accuracy")]` (all objects right)."""
        if self.num_objects == 1:
            return super().default_metrics()
        return [TopKExactMatch(self.num_objects, name="accuracy")]

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
        `reconstruction_weight` times the sum (`CapsNet`) or the mean
        (`EfficientCapsNet`) of the squared pixel errors of each image,
        averaged over the batch (weighted by `sample_weight`,
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
        # The reconstruction targets are the images the encoder sees.
        x = standardize_images(x, self.image_shape, type(self).__name__)
        capsules = self.class_capsules(x, training=training)
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
        num_pixels = num_images * math.prod(self.image_shape)
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
        if self.reconstruction_reduction == "sum":
            per_image = ops.sum(errors, axis=-1)
        else:
            per_image = ops.mean(errors, axis=-1)
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
                    f"A {type(self).__name__} with num_objects="
                    f"{self.num_objects} and a "
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
                f"The targets of a {type(self).__name__} with num_objects="
                f"{self.num_objects} lack {', '.join(missing)}. Received: "
                f"y.keys()={sorted(y)}"
            )
        if self.num_objects == 1:
            return y["labels"], None, None
        object_labels, objects = y.get("object_labels"), y.get("objects")
        expected = {
            "object_labels": (self.num_objects, self.num_classes),
            "objects": (self.num_objects,) + self.image_shape,
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
                    f'Target "{key}" of a {type(self).__name__} with '
                    "num_objects="
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
        return ops.reshape(images, (-1, num_objects) + self.image_shape)

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
            ValueError: If the model was built without a decoder, or if
                `y` is not of the shape above.
        """
        self._check_decoder()
        return self._decode(
            ops.convert_to_tensor(capsules), self._check_labels(y), False
        )

    def _check_decoder(self):
        if self.decoder is None:
            name = self.decoder_argument
            raise ValueError(
                f"This {type(self).__name__} has no decoder to reconstruct "
                f"with. Build it with {name} set. Received: {name}=None"
            )

    def _check_labels(self, y):
        y = ops.convert_to_tensor(y)
        if len(y.shape) not in (2, 3) or y.shape[-1] != self.num_classes:
            raise ValueError(
                "Argument y must hold labels of shape (batch_size, "
                f"num_classes) or (batch_size, K, num_classes), with "
                f"num_classes={self.num_classes}. Received: "
                f"y.shape={tuple(y.shape)}"
            )
        return y

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
            ValueError: If the model was built without a decoder, if `y`
                is not of the shape above, or if `x` is not of the
                model's image shape.
            TypeError: If `x` is neither float nor `uint8` images.
        """
        self._check_decoder()
        if y is not None:
            y = self._check_labels(y)
        capsules = self.class_capsules(x)
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
