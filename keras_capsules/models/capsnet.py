"""CapsNet: the three-layer capsule network of Sabour et al. (2017)."""

import keras

from keras_capsules._validation import check_image_shape
from keras_capsules._validation import check_image_size
from keras_capsules._validation import check_int_tuple
from keras_capsules._validation import check_non_negative_number
from keras_capsules._validation import check_num_objects
from keras_capsules._validation import check_positive_int
from keras_capsules.layers.dense_caps import DenseCaps
from keras_capsules.layers.length import Length
from keras_capsules.layers.primary_caps import PrimaryCaps
from keras_capsules.models._capsule_classifier import CapsuleClassifier
from keras_capsules.models._decoders import dense_decoder


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsNet(CapsuleClassifier):
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

    decoder_argument = "decoder_units"

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
        ):
            check_positive_int(value, name)
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
            input_shape,
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
            name="digit_caps",
        )
        length = Length(name="length")
        decoder = None
        if decoder_units is not None:
            decoder = dense_decoder(
                num_classes * capsule_dim, decoder_units, input_shape
            )

        # === Functional Model ===
        images = keras.Input(shape=input_shape, name="images")
        capsules = digit_caps(primary_caps(conv1(images)))
        super().__init__(
            inputs=images,
            outputs=length(capsules),
            length=length,
            decoder=decoder,
            num_classes=num_classes,
            capsule_dim=capsule_dim,
            num_objects=num_objects,
            image_shape=input_shape,
            reconstruction_weight=reconstruction_weight,
            **kwargs,
        )
        self.conv1 = conv1
        self.primary_caps = primary_caps
        self.digit_caps = digit_caps

        # === Config ===
        self.routing_iterations = routing_iterations
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
        features = self.conv1(x, training=training)
        primary = self.primary_caps(features, training=training)
        return self.digit_caps(primary, training=training)

    def default_optimizer(self):
        """The optimizer of `compile(optimizer="auto")`: the paper's Adam.

        Returns:
            `keras.optimizers.Adam` with a learning rate of 1e-3 decayed by
            0.96 every 2000 steps, continuously, as the official code
            (`keras.optimizers.schedules.ExponentialDecay(1e-3,
            decay_steps=2000, decay_rate=0.96)`).
        """
        return keras.optimizers.Adam(
            learning_rate=keras.optimizers.schedules.ExponentialDecay(
                1e-3, decay_steps=2000, decay_rate=0.96
            )
        )

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "input_shape": self.image_shape,
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
