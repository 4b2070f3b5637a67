"""CapsNet: the three-layer capsule network of Sabour et al. (2017)."""

import keras

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_image_shape
from keras_capsules._validation import check_image_size
from keras_capsules._validation import check_int_tuple
from keras_capsules._validation import check_no_input_shape
from keras_capsules._validation import check_non_negative_number
from keras_capsules._validation import check_num_objects
from keras_capsules._validation import check_positive_int
from keras_capsules.layers.dense_caps import DenseCaps
from keras_capsules.layers.length import Length
from keras_capsules.layers.primary_caps import PrimaryCaps
from keras_capsules.models._base import length_aware_rate
from keras_capsules.models._capsule_classifier import CapsuleClassifier
from keras_capsules.models._decoders import dense_decoder
from keras_capsules.models._images import mask_non_finite
from keras_capsules.models._images import standardize as standardize_images

# The fraction of a run of known length that `compile(total_steps=N)` keeps
# Adam at 1e-3 before its cosine to zero (docs/design/
# default_training_settings.md: chosen on the quickstart's validation split).
_HELD_FRACTION = 0.8


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsNet(CapsuleClassifier):
    """The CapsNet of "Dynamic Routing Between Capsules".

    A 256-filter 9x9 ReLU convolution (Conv1) feeds a convolutional capsule
    layer (`PrimaryCaps`, 32 types of 8D capsules, 9x9 kernel, stride 2),
    whose 1152 capsules are routed by agreement into one 16D capsule per
    class (DigitCaps, a `DenseCaps` layer). The output is the length of
    each class capsule (`Length`), a score in `[0, 1)`; the class is its
    argmax. With the defaults the model has 8,215,568 parameters, 1,411,344
    of them in the decoder.

    A decoder of three dense layers (512 and 1024 ReLU units, then one
    sigmoid per pixel) reconstructs the input from the class capsules with
    all but one masked out (`Mask`): the capsule of the true label in
    training and evaluation, the longest in `reconstruct(x)`. Its loss,
    `reconstruction_weight` times the per-image sum of squared errors, is
    added to the margin loss (Eq. 4) and logged as `reconstruction_loss`.
    `compute_loss` runs the encoder on `x` for the decoder
    (docs/performance.md, "The training step"). `compile()` uses the
    paper's Adam, the margin loss and the accuracy.

    With `num_objects=K > 1` (MultiMNIST) `fit` takes the targets of
    `datasets.multi_mnist`, and each of the K objects is reconstructed from
    its own capsule (docs/dynamic_routing.md).

    Args:
        image_shape: Tuple of 3 integers, the `(height, width, channels)`
            of the images, channels last. Defaults to `(28, 28, 1)`.
        num_classes: Integer, the number of classes. Defaults to `10`.
        routing_iterations: Integer, the routing iterations of DigitCaps.
            Defaults to `3`.
        leaky_routing: Boolean, DigitCaps' leaky routing. Defaults to
            `False`.
        stop_gradient: Boolean, whether gradients reach the votes only
            through the last routing iteration. Defaults to `False`.
        routing_bias: Boolean, whether DigitCaps adds a learned bias
            before the squash (its `use_bias`; the official code has one).
            Defaults to `False`.
        conv_filters: Integer, the filters of Conv1. Defaults to `256`.
        conv_kernel_size: Integer, its kernel size. Defaults to `9`.
        num_primary_capsules: Integer, the capsule types of PrimaryCaps.
            Defaults to `32`.
        primary_capsule_dim: Integer, their dimension. Defaults to `8`.
        primary_kernel_size: Integer, its kernel size. Defaults to `9`.
        primary_strides: Integer, its strides. Defaults to `2`.
        capsule_dim: Integer, the dimension of the class capsules.
            Defaults to `16`.
        decoder_units: Tuple of integers, the decoder's hidden sizes, or
            `None` for no decoder. Defaults to `(512, 1024)`.
        reconstruction_weight: Float, the weight of the reconstruction
            loss. Defaults to `0.0005`.
        num_objects: Integer, the objects (digits) in each image: `1`, or
            `2` for MultiMNIST. Defaults to `1`.
        **kwargs: Keyword arguments of `keras.Model`, such as `name`.

    Returns:
        Called on images `(batch_size, height, width, channels)` in
        `[0, 1]`: class-capsule lengths `(batch_size, num_classes)`.


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

    decoder_argument = "decoder_units"

    def __init__(
        self,
        image_shape=(28, 28, 1),
        num_classes=10,
        routing_iterations=3,
        leaky_routing=False,
        stop_gradient=False,
        routing_bias=False,
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
        check_no_input_shape(kwargs, "CapsNet")
        image_shape = check_image_shape(image_shape)
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
        ):
            check_positive_int(value, name)
        check_bool(leaky_routing, "leaky_routing")
        check_bool(stop_gradient, "stop_gradient")
        check_bool(routing_bias, "routing_bias")
        check_num_objects(num_objects, num_classes)
        decoder_units = check_int_tuple(
            decoder_units,
            "decoder_units",
            allow_none=True,
            meaning=", the hidden layer sizes of the decoder (None for no "
            "decoder)",
        )
        check_non_negative_number(
            reconstruction_weight, "reconstruction_weight"
        )
        check_image_size(
            image_shape,
            [
                ("Conv1", conv_kernel_size, 1),
                ("PrimaryCaps", primary_kernel_size, primary_strides),
            ],
            "CapsNet",
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
            use_bias=routing_bias,
            leaky_routing=leaky_routing,
            stop_gradient=stop_gradient,
            name="digit_caps",
        )
        length = Length(name="length")
        decoder = None
        if decoder_units is not None:
            decoder = dense_decoder(
                num_classes * capsule_dim, decoder_units, image_shape
            )

        # === Functional Model ===
        images = keras.Input(shape=image_shape, name="images")
        capsules = digit_caps(primary_caps(conv1(images)))
        super().__init__(
            inputs=images,
            outputs=length(capsules),
            length=length,
            decoder=decoder,
            num_classes=num_classes,
            capsule_dim=capsule_dim,
            num_objects=num_objects,
            image_shape=image_shape,
            reconstruction_weight=reconstruction_weight,
            **kwargs,
        )
        self.conv1 = conv1
        self.primary_caps = primary_caps
        self.digit_caps = digit_caps

        # === Config ===
        self.routing_iterations = routing_iterations
        self.leaky_routing = leaky_routing
        self.stop_gradient = stop_gradient
        self.routing_bias = routing_bias
        self.conv_filters = conv_filters
        self.conv_kernel_size = conv_kernel_size
        self.num_primary_capsules = num_primary_capsules
        self.primary_capsule_dim = primary_capsule_dim
        self.primary_kernel_size = primary_kernel_size
        self.primary_strides = primary_strides
        self.decoder_units = decoder_units

    def class_capsules(self, x, training=False):
        """Returns the class capsules of images `x`.

        Args:
            x: Images of shape `(batch_size, height, width, channels)`.
            training: Python boolean, whether to run in training mode.
                Defaults to `False`.

        Returns:
            A tensor of shape `(batch_size, num_classes, capsule_dim)`: the
            DigitCaps activity vectors, whose lengths `predict` returns.
            As for every model of `keras_capsules.models`, one direct
            call on the whole of `x`: pass batches of a size that fits in
            memory.
        """
        images = standardize_images(x, self.image_shape, type(self).__name__)
        features = self.conv1(images, training=training)
        primary = self.primary_caps(features, training=training)
        capsules = self.digit_caps(primary, training=training)
        return mask_non_finite(images, capsules)

    def default_optimizer(self, total_steps=None):
        """The optimizer of `compile(optimizer="auto")`: Adam at 1e-3.

        The learning rate depends on whether the run's length is known:

        - with `total_steps`, 1e-3 held for the first 80 % of the run, then
          decayed to zero by a cosine over the last 20 %:
          `keras.optimizers.schedules.CosineDecay(1e-3, total_steps - h,
          warmup_target=1e-3, warmup_steps=h)` with `h = round(0.8 *
          total_steps)`, at most `total_steps - 1`. A run of tens of steps
          keeps the rate it needs; a long one ends annealed;
        - without, the official code's 1e-3 decayed continuously by 0.96
          every 2,000 steps, `keras.optimizers.schedules.ExponentialDecay(
          1e-3, decay_steps=2000, decay_rate=0.96)`.

        Args:
            total_steps: Optional positive integer, the training steps of
                the run. Defaults to `None`.

        Returns:
            A `keras.optimizers.Adam`.

        Raises:
            ValueError: If `total_steps` is not a positive integer.
        """
        learning_rate = length_aware_rate(
            total_steps, 1e-3, 1e-3, 0.96, 2000, hold=_HELD_FRACTION
        )
        return keras.optimizers.Adam(learning_rate)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "image_shape": self.image_shape,
            "num_classes": self.num_classes,
            "routing_iterations": self.routing_iterations,
            "leaky_routing": self.leaky_routing,
            "stop_gradient": self.stop_gradient,
            "routing_bias": self.routing_bias,
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
