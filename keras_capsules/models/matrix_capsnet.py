"""MatrixCapsNet: the EM-routing capsule network of Hinton et al. (2018)."""

import keras

from keras_capsules._validation import check_bool
from keras_capsules._validation import check_image_shape
from keras_capsules._validation import check_image_size
from keras_capsules._validation import check_int
from keras_capsules._validation import check_non_negative_number
from keras_capsules._validation import check_option
from keras_capsules._validation import check_positive_int
from keras_capsules.layers._em_routing import ROUTINGS
from keras_capsules.layers._em_routing import model_routing
from keras_capsules.layers.em_class_caps import EMClassCaps
from keras_capsules.layers.em_conv_caps import EMConvCaps
from keras_capsules.layers.primary_matrix_caps import PrimaryMatrixCaps
from keras_capsules.losses.spread_loss import SpreadLoss
from keras_capsules.models._base import CapsuleModel
from keras_capsules.models._base import is_auto
from keras_capsules.models._base import read_only_presets

# Conv1 is a 5x5 stride-2 valid convolution and the two convolutional
# capsule layers use 3x3 kernels with strides 2 then 1 (paper, Figure 1).
_CONV_KERNEL_SIZE = 5
_CONV_STRIDES = 2
_CAPS_KERNEL_SIZE = 3
_CAPS_STRIDES = (2, 1)

# A, B, C and D of the paper (Section 5): Conv1 filters, primary capsule
# types and the capsule types of the two convolutional capsule layers.
# "full" and "small" are the paper's networks (310K and 68K parameters on
# smallNORB); "tiny" is not from the paper: every layer still routes, and a
# training step takes a fraction of a second on a CPU, for smoke runs.
_PRESETS = {
    "full": {"A": 32, "B": 32, "C": 32, "D": 32},
    "small": {"A": 64, "B": 8, "C": 16, "D": 16},
    "tiny": {"A": 8, "B": 4, "C": 4, "D": 4},
}
_SCHEDULES = ("cosine", "official")


@keras.saving.register_keras_serializable(package="keras_capsules")
class MatrixCapsNet(CapsuleModel):
    """The matrix-capsule network of "Matrix capsules with EM routing".

    A ReLU convolution (Conv1: `A` filters, 5x5, stride 2) feeds primary
    matrix capsules (`PrimaryMatrixCaps`: `B` types of 4x4 poses with an
    activation each, 1x1 kernel), two convolutional capsule layers routed
    by EM (`EMConvCaps`: `C` types, 3x3 kernel, stride 2, then `D` types,
    3x3 kernel, stride 1), and class capsules (`EMClassCaps`, one capsule
    per class, with coordinate addition). All convolutions are unpadded:
    on 32x32 smallNORB crops the grids go 14 -> 14 -> 6 -> 4. The model's
    output is the activation of each class capsule, a probability in
    `(0, 1)`: `predict(x)` returns shape `(batch_size, num_classes)` and
    the class is its argmax. `class_capsules(x)`, a direct call, returns
    the class pose matrices and activations as tensors.

    With the paper's `A = B = C = D = 32` on one-channel 32x32 images the
    model has 316,394 trainable parameters (Conv1 832, PrimaryMatrixCaps
    17,952, ConvCaps1 and ConvCaps2 147,520 each, ClassCaps 2,570; "310K"
    in the paper), and the small network (`A = 64, B = 8, C = D = 16`)
    has 67,154 ("68K").

    Weights start from the official initializers: Conv1 from a truncated
    normal with standard deviation 0.05 and biases of 0.1, the primary
    capsules' pose and activation kernels with 0.5 and 3.0, the
    convolutional capsule transforms with 0.3 and the class transforms
    with 0.01 (the `EMConvCaps` and `EMClassCaps` defaults). The routed
    layers run with their defaults, chosen from learning curves on MNIST
    (docs/em_routing.md): the official per-type normalisation of the
    assignments over overlapping windows, 2 EM iterations, the paper's
    M-step with an inverse temperature of 1e-3 and `beta_v = beta_a = 0`
    at the start. `routing="official"` gives the three routed layers the
    official code's routing instead, which they reproduce to float
    precision (3 iterations, its M-step with `final_beta` 0.01, a quarter
    of it in the class capsules, and its E-step numerics); the
    initializers stay as above. Its iterations and M-step with the
    all-parents normalisation kept the network near chance.

    The spread-loss margin is real state with one owner: the model's
    `spread_margin`, a non-trainable scalar `keras.Variable` that starts
    at 0.2. The `keras_capsules.losses.SpreadLoss` of `compile()` reads
    it, and `keras_capsules.callbacks.SpreadMarginScheduler` assigns it
    during `fit` on every backend. It is saved with the weights.

    `compile()` without arguments uses Adam with a learning rate of 0.04
    decayed to zero over the run by a cosine, whose length it takes from
    the first `fit` (or `compile(total_steps=...)`); with
    `compile(schedule="official")` it is the official code's, 0.01
    decayed continuously by 0.96 every 20,000 steps (see
    `default_optimizer`). Both use Adam's `epsilon=1e-8`, the spread loss
    (Eq. 3, summed over classes as in the paper) and the accuracy of the
    argmax. The official weight decay, `2e-7 * sum(w ** 2) / 2` added to
    the loss for every kernel (not the biases, `beta_v` or `beta_a`), is
    the model's `weight_decay` argument: an `L2(weight_decay / 2)` kernel
    regularizer on each layer, the exact equivalent. (`AdamW`'s decoupled
    decay would not pass through Adam's normalisation as the official
    coupled decay does.)

    `MatrixCapsNet.from_preset(name, **kwargs)` builds the networks of
    `MatrixCapsNet.presets`: `"full"` (the paper's, A=B=C=D=32),
    `"small"` (the paper's small network, A=64, B=8, C=D=16) and `"tiny"`
    (A=8, B=4, C=D=4, for quick checks); arguments given override the
    preset's.

    See Hinton, Sabour & Frosst, "Matrix capsules with EM routing"
    (ICLR 2018), Figure 1.

    Args:
        input_shape: Tuple of 3 integers, the `(height, width, channels)`
            of the images, channels last; at least 17x17. Defaults to
            `(32, 32, 1)`.
        num_classes: Integer, the number of classes (class capsules).
            Defaults to `5` (smallNORB).
        A: Integer, the filters of Conv1. Defaults to `32`.
        B: Integer, the primary capsule types. Defaults to `32`.
        C: Integer, the capsule types of ConvCaps1. Defaults to `32`.
        D: Integer, the capsule types of ConvCaps2. Defaults to `32`.
        routing_iterations: Optional integer, the EM iterations of every
            routed layer, checked by the layers. Defaults to `None`, the
            routing setting's: 2 by default (the paper uses 3, which
            learned far more slowly here; see docs/em_routing.md).
        coordinate_addition: Boolean, whether the class capsules add the
            position of each input capsule to its votes. Defaults to
            `True`.
        weight_decay: Non-negative float, the official weight-decay
            coefficient (see above); `0` for none. Defaults to `2e-7`.
        routing: `"default"` or `"official"`: the routed layers' defaults,
            or the official code's routing, `ops.OFFICIAL_EM_OPTIONS` in
            the convolutional capsules and `ops.OFFICIAL_EM_CLASS_OPTIONS`
            in the class capsules. Defaults to `"default"`.
        **kwargs: Keyword arguments of `keras.Model`, such as `name`.

    Call arguments:
        inputs: Images of shape `(batch_size, height, width, channels)`.
        training: Python boolean, whether the call is in training mode.

    Returns:
        Class activations of shape `(batch_size, num_classes)`.

    Raises:
        TypeError: If a boolean or numeric argument has the wrong type.
        ValueError: If an argument is out of its documented range,
            or if the images are smaller than 17x17.

    Example:

    >>> import numpy as np
    >>> import keras_capsules
    >>> # "small" and "full" are the paper's networks; "tiny" runs in seconds.
    >>> model = keras_capsules.models.MatrixCapsNet.from_preset(
    ...     "tiny", input_shape=(24, 24, 1), num_classes=5
    ... )
    >>> model.compile()  # Adam 0.04, cosine over the fit, SpreadLoss.
    >>> x = np.random.rand(8, 24, 24, 1).astype("float32")
    >>> y = np.eye(5, dtype="float32")[np.arange(8) % 5]
    >>> scheduler = keras_capsules.callbacks.SpreadMarginScheduler(
    ...     ramp_epochs=2, update_freq="epoch"
    ... )
    >>> history = model.fit(
    ...     x, y, epochs=2, batch_size=4, callbacks=[scheduler], verbose=0
    ... )
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

    # Read-only: name -> {"A": ..., "B": ..., "C": ..., "D": ...}.
    presets = read_only_presets(_PRESETS)

    def __init__(
        self,
        input_shape=(32, 32, 1),
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
        input_shape = check_image_shape(input_shape)
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
        check_option(routing, "routing", ROUTINGS)
        conv_routing, class_routing = model_routing(routing, routing_iterations)
        # 5x5/2 then 3x3/2 then 3x3/1, all valid: 1 <- 3 <- 7 <- 17.
        check_image_size(
            input_shape,
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
        images = keras.Input(shape=input_shape, name="images")
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
        # `input_shape` is a read-only property of functional models, equal
        # to `(None,) + input_shape`, so the argument is kept under a
        # private name.
        self._image_shape = input_shape

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        *,
        schedule="cosine",
        total_steps=None,
        **kwargs,
    ):
        """Configures the model for training.

        A `SpreadLoss`, whether the default or passed in, reads the
        model's `spread_margin` variable: a given loss's margin becomes the
        variable's value, and the loss then reads the variable, which is
        what `SpreadMarginScheduler` assigns.

        Args:
            optimizer: An optimizer, or `"auto"` for
                `default_optimizer(schedule, total_steps)`. Defaults to
                `"auto"`.
            loss: A loss on the class activations, or `"auto"` for
                `keras_capsules.losses.SpreadLoss` reading
                `self.spread_margin`. Defaults to `"auto"`.
            schedule: The learning-rate schedule of the `"auto"`
                optimizer, `"cosine"` or `"official"`; see
                `default_optimizer`. Defaults to `"cosine"`.
            total_steps: Positive integer, the training steps over which
                the `"cosine"` schedule decays, or `None` to take them
                from the first `fit` of the model. Defaults to `None`.
            **kwargs: `metrics` (`"auto"` for the accuracy of the argmax),
                `jit_compile` (`"auto"` for XLA on TensorFlow and JAX, as
                in `CapsNet.compile`) and other arguments of
                `keras.Model.compile`.
        """
        if is_auto(optimizer):
            optimizer = self.default_optimizer(schedule, total_steps)
        if isinstance(loss, SpreadLoss) and loss.margin is not (
            self.spread_margin
        ):
            self.spread_margin.assign(loss.margin.value)
            loss.margin = self.spread_margin
        super().compile(optimizer, loss, **kwargs)

    def default_optimizer(self, schedule="cosine", total_steps=None):
        """The optimizer of `compile(optimizer="auto")`.

        Both schedules use Adam with the `epsilon=1e-8` of the official
        code's TensorFlow 1 Adam (Keras' default is 1e-7), which damps the
        steps of the many transform entries whose gradients are that small
        (docs/design/em_routing_defaults.md).

        - `"cosine"`: a learning rate of 0.04 decayed to zero over the run,
          `keras.optimizers.schedules.CosineDecay(0.04, total_steps)`.
          It learned faster than the official setting in runs of one
          epoch on MNIST (docs/em_routing.md), and needs the run's length.
        - `"official"`: the official code's (google-research, capsule_em
          `experiment.py` and `model.py`), a learning rate of 0.01
          decayed continuously by 0.96 every 20,000 steps,
          `keras.optimizers.schedules.ExponentialDecay(0.01,
          decay_steps=20000, decay_rate=0.96)`, with batches of 64.

        Args:
            schedule: `"cosine"` or `"official"`. Defaults to `"cosine"`.
            total_steps: Positive integer, the steps of the `"cosine"`
                decay, or `None`: the first `fit` of this model, once
                compiled with the optimizer, sets them to its `(epochs -
                initial_epoch) * steps_per_epoch`, with `steps_per_epoch`
                as given to `fit` or counted from its data (batches of an
                array, or `len(x)` for a `keras.utils.PyDataset` or any
                other `x` of finite length). An optimizer used outside
                this model's `fit` (another model, a custom loop) is not
                sized that way: pass `total_steps` for it. Ignored by
                `"official"`. Defaults to `None`.

        Returns:
            A `keras.optimizers.Adam`.

        Raises:
            ValueError: If `schedule` is unknown or `total_steps` is not a
                positive integer.
        """
        check_option(schedule, "schedule", _SCHEDULES)
        total_steps = check_int(
            total_steps, "total_steps", minimum=1, allow_none=True
        )
        if schedule == "official":
            learning_rate = keras.optimizers.schedules.ExponentialDecay(
                0.01, decay_steps=20000, decay_rate=0.96
            )
        else:
            learning_rate = keras.optimizers.schedules.CosineDecay(
                0.04, total_steps or 1
            )
        optimizer = keras.optimizers.Adam(learning_rate, epsilon=1e-8)
        if schedule == "cosine" and total_steps is None:
            self.size_on_first_fit(
                optimizer, learning_rate, {"schedule": "cosine"}
            )
        return optimizer

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
        x = self.conv1(x, training=training)
        x = self.primary_caps(x, training=training)
        x = self.conv_caps1(x, training=training)
        x = self.conv_caps2(x, training=training)
        poses, activations = self.class_caps(x, training=training)
        return poses, activations

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "input_shape": self._image_shape,
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
