"""EfficientCapsNet: self-attention routing (Mazzia et al. 2021)."""

import keras

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_image_shape
from keras_capsules._validation import check_image_size
from keras_capsules._validation import check_int_tuple
from keras_capsules._validation import check_no_input_shape
from keras_capsules._validation import check_non_negative_number
from keras_capsules._validation import check_num_objects
from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_int
from keras_capsules.layers.depthwise_primary_caps import DepthwisePrimaryCaps
from keras_capsules.layers.length import Length
from keras_capsules.layers.self_attention_caps import SelfAttentionCaps
from keras_capsules.models._capsule_classifier import CapsuleClassifier
from keras_capsules.models._decoders import CONVOLUTIONAL_DECODER_SIZE
from keras_capsules.models._decoders import convolutional_decoder
from keras_capsules.models._decoders import dense_decoder
from keras_capsules.models._images import mask_non_finite
from keras_capsules.models._images import standardize as standardize_images
from keras_capsules.models._reference_weights import from_reference_weights
from keras_capsules.ops.squash import FORMS

# The authors' three networks (their `efficient_capsnet_graph_*.py`).
_ARCHITECTURES = {
    "mnist": {
        "description": "The authors' MNIST network (28x28x1, the defaults).",
        "config": {"image_shape": (28, 28, 1)},
    },
    "multimnist": {
        "description": "The authors' MultiMNIST network: 36x36x1, two "
        "more strides to reach a 1x1 map, a 5x5 stride-2 primary kernel, "
        "two objects.",
        "config": {
            "image_shape": (36, 36, 1),
            "conv_strides": (1, 1, 2, 2),
            "primary_kernel_size": 5,
            "primary_strides": 2,
            "num_objects": 2,
        },
    },
    "smallnorb": {
        "description": "The authors' smallNORB network: 48x48x2 stereo "
        "pairs, 5 classes, a 7x7 stride-2 first convolution, LeakyReLU, "
        "instance normalisation, an 8x8 primary kernel and a "
        "convolutional decoder.",
        "config": {
            "image_shape": (48, 48, 2),
            "num_classes": 5,
            "conv_kernel_sizes": (7, 3, 3, 3),
            "conv_strides": (2, 1, 1, 2),
            "primary_kernel_size": 8,
            "activation": "leaky_relu",
            "normalization": "instance",
            "decoder_type": "convolutional",
        },
    },
}
_ACTIVATIONS = ("relu", "leaky_relu")
_NORMALIZATIONS = ("batch", "instance")
_DECODER_TYPES = ("dense", "convolutional")
# The authors' learning rate: 5e-4 times 0.97 after every epoch of 60,000
# images at batch 16 (3,750 steps), down to 5e-5, one rate per epoch.
_AUTHORS_RATES = [5e-4]
while _AUTHORS_RATES[-1] * 0.97 > 5e-5:
    _AUTHORS_RATES.append(5e-4 * 0.97 ** len(_AUTHORS_RATES))
_AUTHORS_RATES = tuple(_AUTHORS_RATES) + (5e-5,)
_AUTHORS_BOUNDARIES = tuple(
    3750 * epoch for epoch in range(1, len(_AUTHORS_RATES))
)
# The hidden layers of the dense decoder (Sabour et al.'s).
_DENSE_DECODER_UNITS = (512, 1024)


def _feature_layers(filters, kernel_sizes, strides, activation, normalization):
    """The convolutions, each followed by its activation and its
    normalisation, in order."""
    layers = []
    for i, (size, kernel, stride) in enumerate(
        zip(filters, kernel_sizes, strides)
    ):
        layers.append(
            keras.layers.Conv2D(
                size,
                kernel,
                strides=stride,
                kernel_initializer="he_normal",
                name=f"conv{i + 1}",
            )
        )
        if activation == "relu":
            layers.append(keras.layers.ReLU(name=f"relu{i + 1}"))
        else:
            layers.append(keras.layers.LeakyReLU(name=f"leaky_relu{i + 1}"))
        if normalization == "batch":
            layers.append(keras.layers.BatchNormalization(name=f"norm{i + 1}"))
        else:
            # Instance normalisation, with the authors' random initial
            # scale and offset.
            layers.append(
                keras.layers.GroupNormalization(
                    groups=-1,
                    epsilon=1e-3,
                    beta_initializer="random_uniform",
                    gamma_initializer="random_uniform",
                    name=f"norm{i + 1}",
                )
            )
    return layers


def _decoder(decoder_type, num_inputs, image_shape):
    if decoder_type == "dense":
        return dense_decoder(
            num_inputs,
            _DENSE_DECODER_UNITS,
            image_shape,
            kernel_initializer="he_normal",
            output_initializer="glorot_normal",
        )
    if decoder_type == "convolutional":
        return convolutional_decoder(num_inputs, image_shape)
    return None


@keras.saving.register_keras_serializable(package="keras_capsules")
class EfficientCapsNet(CapsuleClassifier, architectures=_ARCHITECTURES):
    """The Efficient-CapsNet of Mazzia, Salvetti & Chiaberge (2021).

    Four valid convolutions, each followed by its activation and a
    normalisation, reduce the image to a small feature map (9x9x128 for
    MNIST); a depthwise convolution over the whole map turns it into 16
    primary capsules of 8 dimensions (`DepthwisePrimaryCaps`), which
    self-attention routing sends to one 16D capsule per class in a single
    pass (`SelfAttentionCaps`). The output is the length of each class
    capsule; the class is its argmax. The MNIST network's encoder has
    161,824 trainable parameters, its dense decoder 1,411,344.

    The decoder and `fit` work as in `CapsNet`; the reconstruction loss
    is `reconstruction_weight` times the mean squared error per pixel, as
    in the authors' code. `EfficientCapsNet.presets` lists the authors'
    networks `"mnist"`, `"multimnist"` and `"smallnorb"` and the trained
    `"efficient_capsnet_mnist"`; `from_reference_weights` loads the
    authors' weight files. Where the paper and the authors' code differ,
    the model follows the code (docs/self_attention_routing.md).

    Args:
        image_shape: Tuple of 3 integers, the `(height, width, channels)`
            of the images, channels last. Defaults to `(28, 28, 1)`.
        num_classes: Integer, the number of classes. Defaults to `10`.
        conv_filters: Tuple of integers, the filters of each convolution.
            Defaults to `(32, 64, 64, 128)`.
        conv_kernel_sizes: Tuple of integers, one kernel size per
            convolution. Defaults to `(5, 3, 3, 3)`.
        conv_strides: Tuple of integers, one stride per convolution.
            Defaults to `(1, 1, 1, 2)`.
        activation: `"relu"` or `"leaky_relu"` (slope 0.3), after each
            convolution. Defaults to `"relu"`.
        normalization: `"batch"` or `"instance"`, after each activation.
            Defaults to `"batch"`.
        primary_kernel_size: Integer, the window of the depthwise primary
            convolution. Defaults to `9`.
        primary_strides: Integer, its stride. Defaults to `1`.
        primary_capsule_dim: Integer, the dimension of the primary
            capsules; it must divide the last convolution's filters.
            Defaults to `8`.
        capsule_dim: Integer, the dimension of the class capsules.
            Defaults to `16`.
        squash_form: The squash of both capsule layers, `"exponential"`
            (the paper's) or `"rational"` (Sabour et al.'s). Defaults to
            `"exponential"`.
        use_prior: Boolean, whether the routing adds its learned prior to
            the coupling logits. Defaults to `True`.
        decoder_type: `"dense"` (512 and 1024 ReLU units, then a sigmoid
            per pixel), `"convolutional"` (the smallNORB decoder, for
            48x48 images) or `None` (no decoder). Defaults to `"dense"`.
        reconstruction_weight: Float, the weight of the per-pixel mean
            squared reconstruction error. Defaults to `0.392`.
        num_objects: Integer, the number of objects in each image: `1`, or
            `2` for MultiMNIST. Defaults to `1`.
        **kwargs: Keyword arguments of `keras.Model`, such as `name`.

    Returns:
        Called on images `(batch_size, height, width, channels)` in
        `[0, 1]`: class-capsule lengths `(batch_size, num_classes)`.


    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> model = keras_capsules.models.EfficientCapsNet()  # the MNIST network
    >>> model.compile()  # Adam 5e-4 x0.97 per epoch, MarginLoss, accuracy.
    >>> x = np.random.rand(8, 28, 28, 1).astype("float32")
    >>> y = np.eye(10, dtype="float32")[np.arange(8)]
    >>> history = model.fit(x, y, epochs=1, batch_size=4, verbose=0)
    >>> model.predict(x, verbose=0).shape  # capsule lengths
    (8, 10)
    >>> tuple(model.reconstruct(x).shape)  # by the predicted class
    (8, 28, 28, 1)

    Reference:
        - [Mazzia, Salvetti & Chiaberge, 2021](
          https://doi.org/10.1038/s41598-021-93977-0)
        - [The authors' TensorFlow code](
          https://github.com/EscVM/Efficient-CapsNet)
    """

    decoder_argument = "decoder_type"
    reconstruction_reduction = "mean"

    # The authors' .h5 weight files: see models/_reference_weights.py.
    from_reference_weights = classmethod(from_reference_weights)

    def __init__(
        self,
        image_shape=(28, 28, 1),
        num_classes=10,
        conv_filters=(32, 64, 64, 128),
        conv_kernel_sizes=(5, 3, 3, 3),
        conv_strides=(1, 1, 1, 2),
        activation="relu",
        normalization="batch",
        primary_kernel_size=9,
        primary_strides=1,
        primary_capsule_dim=8,
        capsule_dim=16,
        squash_form="exponential",
        use_prior=True,
        decoder_type="dense",
        reconstruction_weight=0.392,
        num_objects=1,
        **kwargs,
    ):
        check_no_input_shape(kwargs, "EfficientCapsNet")
        image_shape = check_image_shape(image_shape)
        for name, value in (
            ("num_classes", num_classes),
            ("primary_kernel_size", primary_kernel_size),
            ("primary_strides", primary_strides),
            ("primary_capsule_dim", primary_capsule_dim),
            ("capsule_dim", capsule_dim),
        ):
            check_positive_int(value, name)
        check_num_objects(num_objects, num_classes)
        conv_filters = check_int_tuple(
            conv_filters, "conv_filters", meaning=", one per convolution"
        )
        depth = len(conv_filters)
        conv_kernel_sizes, conv_strides = (
            check_int_tuple(value, name, depth, meaning=", one per convolution")
            for name, value in (
                ("conv_kernel_sizes", conv_kernel_sizes),
                ("conv_strides", conv_strides),
            )
        )
        check_option(squash_form, "squash_form", FORMS)
        check_bool(use_prior, "use_prior")
        check_option(activation, "activation", _ACTIVATIONS)
        check_option(normalization, "normalization", _NORMALIZATIONS)
        if decoder_type is not None:
            check_option(decoder_type, "decoder_type", _DECODER_TYPES)
        check_non_negative_number(
            reconstruction_weight, "reconstruction_weight"
        )
        if conv_filters[-1] % primary_capsule_dim:
            raise ValueError(
                "Argument primary_capsule_dim must divide the filters of "
                f"the last convolution ({conv_filters[-1]}). Received: "
                f"primary_capsule_dim={primary_capsule_dim}"
            )
        check_image_size(
            image_shape,
            [
                (f"conv{i + 1}", kernel, stride)
                for i, (kernel, stride) in enumerate(
                    zip(conv_kernel_sizes, conv_strides)
                )
            ]
            + [("the primary capsules", primary_kernel_size, primary_strides)],
            "EfficientCapsNet",
        )
        size = CONVOLUTIONAL_DECODER_SIZE
        if decoder_type == "convolutional" and image_shape[:2] != (size, size):
            raise ValueError(
                f"The convolutional decoder draws {size}x{size} images; use "
                'decoder_type="dense" for other sizes. '
                f"Received: image_shape={image_shape}"
            )

        # === Layers ===
        # Held in locals until the functional model exists (the PyTorch
        # backend cannot track sublayers assigned before `Model.__init__`).
        features = _feature_layers(
            conv_filters,
            conv_kernel_sizes,
            conv_strides,
            activation,
            normalization,
        )
        primary_caps = DepthwisePrimaryCaps(
            capsule_dim=primary_capsule_dim,
            kernel_size=primary_kernel_size,
            strides=primary_strides,
            squash_form=squash_form,
            name="primary_caps",
        )
        digit_caps = SelfAttentionCaps(
            num_capsules=num_classes,
            capsule_dim=capsule_dim,
            use_prior=use_prior,
            squash_form=squash_form,
            name="digit_caps",
        )
        length = Length(name="length")
        decoder = _decoder(decoder_type, num_classes * capsule_dim, image_shape)

        # === Functional Model ===
        images = keras.Input(shape=image_shape, name="images")
        x = images
        for layer in features:
            x = layer(x)
        capsules = digit_caps(primary_caps(x))
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
        self.features = features
        self.primary_caps = primary_caps
        self.digit_caps = digit_caps

        # === Config ===
        self.conv_filters = conv_filters
        self.conv_kernel_sizes = conv_kernel_sizes
        self.conv_strides = conv_strides
        self.activation = activation
        self.normalization = normalization
        self.primary_kernel_size = primary_kernel_size
        self.primary_strides = primary_strides
        self.primary_capsule_dim = primary_capsule_dim
        self.squash_form = squash_form
        self.use_prior = use_prior
        self.decoder_type = decoder_type

    def class_capsules(self, x, training=False):
        """Returns the class capsules of images `x`.

        Args:
            x: Images of shape `(batch_size, height, width, channels)`.
            training: Python boolean, whether to run in training mode.
                Defaults to `False`.

        Returns:
            A tensor of shape `(batch_size, num_classes, capsule_dim)`,
            whose lengths `predict` returns. As for every model of
            `keras_capsules.models`, one direct call on the whole of `x`:
            pass batches of a size that fits in memory.
        """
        images = standardize_images(x, self.image_shape, type(self).__name__)
        x = images
        for layer in self.features:
            x = layer(x, training=training)
        primary = self.primary_caps(x, training=training)
        capsules = self.digit_caps(primary, training=training)
        return mask_non_finite(images, capsules)

    def default_optimizer(self, total_steps=None):
        """The optimizer of `compile(optimizer="auto")`: the authors' Adam.

        Adam with a learning rate of 5e-4 multiplied by 0.97 after every
        epoch of 60,000 images at batch 16 (3,750 steps), down to 5e-5
        (reached after 76 epochs), as a step function of the training step
        (`keras.optimizers.schedules.PiecewiseConstantDecay`).

        Args:
            total_steps: Optional positive integer, the training steps of
                the run. The schedule does not depend on the run's length,
                so it is not used. Defaults to `None`.

        Returns:
            A `keras.optimizers.Adam`.
        """
        return keras.optimizers.Adam(
            learning_rate=keras.optimizers.schedules.PiecewiseConstantDecay(
                list(_AUTHORS_BOUNDARIES), list(_AUTHORS_RATES)
            )
        )

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "image_shape": self.image_shape,
            "num_classes": self.num_classes,
            "conv_filters": self.conv_filters,
            "conv_kernel_sizes": self.conv_kernel_sizes,
            "conv_strides": self.conv_strides,
            "activation": self.activation,
            "normalization": self.normalization,
            "primary_kernel_size": self.primary_kernel_size,
            "primary_strides": self.primary_strides,
            "primary_capsule_dim": self.primary_capsule_dim,
            "capsule_dim": self.capsule_dim,
            "squash_form": self.squash_form,
            "use_prior": self.use_prior,
            "decoder_type": self.decoder_type,
            "reconstruction_weight": self.reconstruction_weight,
            "num_objects": self.num_objects,
        }
