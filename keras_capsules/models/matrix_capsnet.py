"""MatrixCapsNet: the EM-routing capsule network of Hinton et al. (2018)."""

import keras

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_image_shape
from keras_capsules._validation import check_image_size
from keras_capsules._validation import check_no_input_shape
from keras_capsules._validation import check_non_negative_number
from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_int
from keras_capsules.layers.em_class_caps import EMClassCaps
from keras_capsules.layers.em_conv_caps import EMConvCaps
from keras_capsules.layers.primary_matrix_caps import PrimaryMatrixCaps
from keras_capsules.losses.spread_loss import SpreadLoss
from keras_capsules.models._base import CapsuleModel
from keras_capsules.models._base import length_aware_rate
from keras_capsules.models._images import mask_non_finite
from keras_capsules.models._images import standardize as standardize_images
from keras_capsules.ops.em import OFFICIAL_EM_CLASS_OPTIONS
from keras_capsules.ops.em import OFFICIAL_EM_OPTIONS

# Conv1 is a 5x5 stride-2 valid convolution and the two convolutional
# capsule layers use 3x3 kernels with strides 2 then 1 (paper, Figure 1).
_CONV_KERNEL_SIZE = 5
_CONV_STRIDES = 2
_CAPS_KERNEL_SIZE = 3
_CAPS_STRIDES = (2, 1)

# A, B, C and D of the paper (Section 5): Conv1 filters, primary capsule
# types and the capsule types of the two convolutional capsule layers.
_ARCHITECTURES = {
    "full": {
        "description": "The paper's network: A = B = C = D = 32 (310K "
        "parameters on smallNORB).",
        "config": {"A": 32, "B": 32, "C": 32, "D": 32},
    },
    "small": {
        "description": "The paper's small network: A = 64, B = 8, "
        "C = D = 16 (68K parameters on smallNORB).",
        "config": {"A": 64, "B": 8, "C": 16, "D": 16},
    },
    "tiny": {
        "description": "Not from the paper: A = 8, B = C = D = 4, every "
        "layer routed, for quick checks on a CPU.",
        "config": {"A": 8, "B": 4, "C": 4, "D": 4},
    },
}
# The routing settings of the three routed layers: the layers' defaults,
# or the official code's.
_ROUTINGS = ("default", "official")


def _routing_arguments(routing, routing_iterations):
    """Keyword arguments `(conv, class)` of the routed layers for a
    `routing` setting; `routing_iterations`, unless `None`, overrides the
    setting's iterations in both."""
    conv, dense = {}, {}
    if routing == "official":
        conv, dense = dict(OFFICIAL_EM_OPTIONS), dict(OFFICIAL_EM_CLASS_OPTIONS)
    if routing_iterations is not None:
        conv["routing_iterations"] = routing_iterations
        dense["routing_iterations"] = routing_iterations
    return conv, dense


@keras.saving.register_keras_serializable(package="keras_capsules")
class MatrixCapsNet(CapsuleModel, architectures=_ARCHITECTURES):
    """The matrix-capsule network of "Matrix capsules with EM routing".

    A ReLU convolution (Conv1: `A` filters, 5x5, stride 2) feeds primary
    matrix capsules (`PrimaryMatrixCaps`: `B` types of 4x4 poses with an
    activation each, 1x1 kernel), two convolutional capsule layers routed
    by EM (`EMConvCaps`: `C` types, 3x3 kernel, stride 2, then `D` types,
    3x3 kernel, stride 1), and class capsules (`EMClassCaps`, one capsule
    per class, with coordinate addition). All convolutions are unpadded:
    on 32x32 smallNORB crops the grids go 14 -> 14 -> 6 -> 4. The output
    is the activation of each class capsule, in `(0, 1)`; the class is
    its argmax. `class_capsules(x)` returns the class poses and
    activations. With `A = B = C = D = 32` on 32x32 images the model has
    316,394 parameters ("310K" in the paper); the small network has
    67,154 ("68K").

    Weights start from the official initializers; the routed layers use
    their defaults (docs/em_routing.md), or with `routing="official"` the
    official code's routing, which they reproduce to float precision.
    The spread-loss margin is the model's `spread_margin`, a non-trainable
    variable that the `SpreadLoss` of `compile()` reads and
    `keras_capsules.callbacks.SpreadMarginScheduler` assigns; it is saved
    with the weights. `compile()` uses `default_optimizer(total_steps)`,
    the spread loss (Eq. 3) and the accuracy. The official weight decay,
    `weight_decay * sum(w ** 2) / 2` for every kernel, is an
    `L2(weight_decay / 2)` kernel regularizer on each layer.

    Args:
        image_shape: Tuple of 3 integers, the `(height, width, channels)`
            of the images, channels last; at least 17x17. Defaults to
            `(32, 32, 1)`.
        num_classes: Integer, the number of classes. Defaults to `5`.
        A: Integer, the filters of Conv1. Defaults to `32`.
        B: Integer, the primary capsule types. Defaults to `32`.
        C: Integer, the capsule types of ConvCaps1. Defaults to `32`.
        D: Integer, the capsule types of ConvCaps2. Defaults to `32`.
        routing_iterations: Optional integer, the EM iterations of every
            routed layer. Defaults to `None`, the `routing` setting's (2
            for `"default"`, 3 for `"official"`).
        coordinate_addition: Boolean, whether the class capsules add the
            position of each input capsule to its votes. Defaults to
            `True`.
        weight_decay: Non-negative float, the official weight-decay
            coefficient; `0` for none. Defaults to `2e-7`.
        routing: `"default"` (the layers' defaults) or `"official"`
            (`ops.OFFICIAL_EM_OPTIONS` in the convolutional capsules,
            `ops.OFFICIAL_EM_CLASS_OPTIONS` in the class capsules).
            Defaults to `"default"`.
        **kwargs: Keyword arguments of `keras.Model`, such as `name`.

    Returns:
        Called on images `(batch_size, height, width, channels)`: class
        activations `(batch_size, num_classes)`.


    The capitals `A`, `B`, `C`, `D` are the paper's own symbols.
    `MatrixCapsNet.presets` lists the architectures `"full"`, `"small"`
    and `"tiny"` and the trained `"matrix_capsnet_small_mnist"`.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> model = keras_capsules.models.MatrixCapsNet.from_preset(
    ...     "tiny", image_shape=(24, 24, 1), num_classes=5
    ... )
    >>> model.compile(total_steps=4)  # Adam 0.04, cosine over 4 steps
    >>> x = np.random.rand(8, 24, 24, 1).astype("float32")
    >>> y = np.eye(5, dtype="float32")[np.arange(8) % 5]
    >>> history = model.fit(x, y, epochs=2, batch_size=4, verbose=0)
    >>> model.predict(x, verbose=0).shape
    (8, 5)
    >>> poses, activations = model.class_capsules(x)
    >>> tuple(poses.shape), tuple(activations.shape)
    ((8, 5, 4, 4), (8, 5))

    Reference:
        - [Hinton et al., 2018](https://openreview.net/forum?id=HJWLfGWRb)
        - [Official TensorFlow code](https://github.com/google-research/
          google-research/tree/master/capsule_em)
    """

    def __init__(
        self,
        image_shape=(32, 32, 1),
        num_classes=5,
        A=32,
        B=32,
        C=32,
        D=32,
        routing_iterations=None,
        coordinate_addition=True,
        weight_decay=2e-7,
        routing="default",
        **kwargs,
    ):
        check_no_input_shape(kwargs, "MatrixCapsNet")
        image_shape = check_image_shape(image_shape)
        for name, value in (
            ("num_classes", num_classes),
            ("A", A),
            ("B", B),
            ("C", C),
            ("D", D),
        ):
            check_positive_int(value, name)
        check_bool(coordinate_addition, "coordinate_addition")
        check_non_negative_number(weight_decay, "weight_decay")
        check_option(routing, "routing", _ROUTINGS)
        conv_routing, class_routing = _routing_arguments(
            routing, routing_iterations
        )
        # 5x5/2 then 3x3/2 then 3x3/1, all valid: 1 <- 3 <- 7 <- 17.
        check_image_size(
            image_shape,
            [
                ("Conv1", _CONV_KERNEL_SIZE, _CONV_STRIDES),
                ("ConvCaps1", _CAPS_KERNEL_SIZE, _CAPS_STRIDES[0]),
                ("ConvCaps2", _CAPS_KERNEL_SIZE, _CAPS_STRIDES[1]),
            ],
            "MatrixCapsNet",
        )

        # === Layers ===
        # Held in locals until the functional model exists: the PyTorch
        # backend cannot track sublayers assigned before `Model.__init__`.
        # The official decay adds weight_decay * l2_loss(w), and l2_loss
        # halves the sum of squares.
        def regularizer():
            if weight_decay == 0:
                return None
            return keras.regularizers.L2(weight_decay / 2)

        # The official initializers. With Keras' fan-in scaled defaults the
        # poses reaching the class capsules are 40 times smaller and the
        # first 200 steps on the MNIST sample stayed at chance; these start
        # from larger poses and left chance sooner.
        conv1 = keras.layers.Conv2D(
            A,
            _CONV_KERNEL_SIZE,
            strides=_CONV_STRIDES,
            activation="relu",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.05),
            bias_initializer=keras.initializers.Constant(0.1),
            kernel_regularizer=regularizer(),
            name="conv1",
        )
        primary_caps = PrimaryMatrixCaps(
            num_capsules=B,
            pose_shape=(4, 4),
            kernel_size=1,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.5),
            activation_initializer=keras.initializers.TruncatedNormal(
                stddev=3.0
            ),
            kernel_regularizer=regularizer(),
            name="primary_caps",
        )
        conv_caps1 = EMConvCaps(
            num_capsules=C,
            kernel_size=_CAPS_KERNEL_SIZE,
            strides=_CAPS_STRIDES[0],
            **conv_routing,
            kernel_regularizer=regularizer(),
            name="conv_caps1",
        )
        conv_caps2 = EMConvCaps(
            num_capsules=D,
            kernel_size=_CAPS_KERNEL_SIZE,
            strides=_CAPS_STRIDES[1],
            **conv_routing,
            kernel_regularizer=regularizer(),
            name="conv_caps2",
        )
        class_caps = EMClassCaps(
            num_classes=num_classes,
            coordinate_addition=coordinate_addition,
            kernel_regularizer=regularizer(),
            name="class_caps",
            **class_routing,
        )

        # === Functional Model ===
        images = keras.Input(shape=image_shape, name="images")
        capsules = conv_caps2(conv_caps1(primary_caps(conv1(images))))
        _, activations = class_caps(capsules)
        super().__init__(inputs=images, outputs=activations, **kwargs)
        self.conv1 = conv1
        self.primary_caps = primary_caps
        self.conv_caps1 = conv_caps1
        self.conv_caps2 = conv_caps2
        self.class_caps = class_caps
        # A model variable, not a Python float: compiled TensorFlow and JAX
        # steps read it on every step (on JAX, only variables the model
        # tracks reach the step), and it is saved with the weights.
        self.spread_margin = keras.Variable(
            0.2, dtype="float32", trainable=False, name="spread_margin"
        )

        # === Config ===
        self.num_classes = num_classes
        self.A = A
        self.B = B
        self.C = C
        self.D = D
        self.routing_iterations = conv_caps1.routing_iterations
        self.routing = routing
        self.coordinate_addition = coordinate_addition
        self.weight_decay = weight_decay
        self.image_shape = image_shape

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
        # A `SpreadLoss`, the default or one passed in, reads the model's
        # `spread_margin`, which `SpreadMarginScheduler` assigns: a given
        # loss's margin becomes the variable's value.
        if isinstance(loss, SpreadLoss) and loss.margin is not (
            self.spread_margin
        ):
            self.spread_margin.assign(loss.margin.value)
            loss.margin = self.spread_margin
        super().compile(
            optimizer,
            loss,
            metrics=metrics,
            jit_compile=jit_compile,
            total_steps=total_steps,
            **kwargs,
        )

    compile.__doc__ = CapsuleModel.compile.__doc__

    def default_optimizer(self, total_steps=None):
        """The optimizer of `compile(optimizer="auto")`.

        Adam with the `epsilon=1e-8` of the official code's TensorFlow 1
        Adam (Keras' default is 1e-7), and a learning rate that depends on
        whether the run's length is known:

        - with `total_steps`, 0.04 decayed to zero over the run by a
          cosine, `keras.optimizers.schedules.CosineDecay(0.04,
          total_steps)`: the fastest learner of the schedules compared
          (docs/design/default_training_settings.md);
        - without, 0.02 decayed continuously by 0.96 every 20,000 steps,
          `keras.optimizers.schedules.ExponentialDecay(0.02, 20000,
          0.96)`: the best of those that need no length.

        The official code's schedule, 0.01 decayed by 0.96 every 20,000
        steps, is `keras.optimizers.Adam(keras.optimizers.schedules.
        ExponentialDecay(0.01, 20000, 0.96), epsilon=1e-8)` passed to
        `compile`.

        Args:
            total_steps: Optional positive integer, the training steps of
                the run. Defaults to `None`.

        Returns:
            A `keras.optimizers.Adam`.

        Raises:
            ValueError: If `total_steps` is not a positive integer.
        """
        learning_rate = length_aware_rate(total_steps, 0.04, 0.02, 0.96, 20000)
        return keras.optimizers.Adam(learning_rate, epsilon=1e-8)

    def default_loss(self):
        """The loss of `compile(loss="auto")`: the paper's spread loss
        (Eq. 3, summed over classes), `SpreadLoss(margin=spread_margin)`."""
        return SpreadLoss(margin=self.spread_margin)

    def class_capsules(self, x, training=False):
        """Returns the pose matrices and activations of the class capsules.

        Args:
            x: Images of shape `(batch_size, height, width, channels)`.
            training: Python boolean, whether to run in training mode.
                Defaults to `False`.

        Returns:
            A tuple `(poses, activations)` of tensors: poses of shape
            `(batch_size, num_classes, 4, 4)` and activations of shape
            `(batch_size, num_classes)`, the latter what `predict`
            returns. As for every model of `keras_capsules.models`, one
            direct call on the whole of `x`: pass batches of a size that
            fits in memory.
        """
        images = standardize_images(x, self.image_shape, type(self).__name__)
        x = self.conv1(images, training=training)
        x = self.primary_caps(x, training=training)
        x = self.conv_caps1(x, training=training)
        x = self.conv_caps2(x, training=training)
        return mask_non_finite(images, self.class_caps(x, training=training))

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "image_shape": self.image_shape,
            "num_classes": self.num_classes,
            "A": self.A,
            "B": self.B,
            "C": self.C,
            "D": self.D,
            "routing_iterations": self.routing_iterations,
            "coordinate_addition": self.coordinate_addition,
            "weight_decay": self.weight_decay,
            "routing": self.routing,
        }
