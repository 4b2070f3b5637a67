"""Every public layer honours a per-layer `dtype` policy.

For each case of `CASES` and each of `"mixed_float16"`,
`"mixed_bfloat16"` (on every backend) and `"float64"` (on the primary
backend) passed to the layer's constructor (the global policy stays
`float32`), the test builds the layer by calling it on `keras.Input`s,
calls it on arrays, and checks that

- every float variable of the layer and of its sublayers (`layer.weights`)
  has the policy's variable dtype (`float64`, or `float32` under the mixed
  policies); non-float variables (seed generator states) are skipped;
- every float output, symbolic and concrete, has the policy's compute
  dtype (`float64`, `float16`, `bfloat16`). The routing ops, the squash and
  `Length` compute in float32 for half-precision inputs, but all of them
  document that they cast their results back to the input's dtype, so no
  layer here returns float32 under a mixed policy;
- the outputs are finite and match those of a float32 layer holding the
  same weights; under float64 they also resolve a change of the inputs far
  below float32's precision, so that no float32 step hides inside.

To add a layer, append `(name, factory, inputs)` to `CASES`: `factory`
takes `**kwargs` (at least `dtype=`) and passes them to the constructor,
and `inputs` is the list of float32 NumPy arrays to call the layer on (a
single array is passed alone, several as a list). The shapes must be
static: the layer is built on `keras.Input(batch_shape=...)`.
"""

import contextlib
import weakref

import keras
import numpy as np
import pytest
from absl.testing import parameterized
from keras import ops

from keras_capsules.layers import ConvCaps
from keras_capsules.layers import DenseCaps
from keras_capsules.layers import DepthwisePrimaryCaps
from keras_capsules.layers import EMClassCaps
from keras_capsules.layers import EMConvCaps
from keras_capsules.layers import Length
from keras_capsules.layers import Mask
from keras_capsules.layers import ObjectCapsuleDecoder
from keras_capsules.layers import PartCapsuleEncoder
from keras_capsules.layers import PrimaryCaps
from keras_capsules.layers import PrimaryMatrixCaps
from keras_capsules.layers import SelfAttentionCaps
from keras_capsules.layers import SetTransformer
from keras_capsules.layers import TemplateDecoder
from keras_capsules.ops import geometric_transform
from keras_capsules.testing import TestCase
from tests import backend_marks

pytestmark = backend_marks.EAGER


def _array(shape, seed, low=0.0, high=1.0):
    rng = np.random.default_rng(seed)
    return rng.uniform(low, high, size=shape).astype("float32")


_IMAGE = _array((2, 7, 7, 3), 0, -1, 1)
_CAPSULES = _array((2, 6, 4), 1, -1, 1)
_LABELS = np.eye(6, dtype="float32")[[1, 4]]
_GRID = _array((2, 5, 5, 3, 4), 2, -1, 1)
_POSES = _array((2, 4, 4, 3, 4, 4), 3, -1, 1)
_ACTIVATIONS = _array((2, 4, 4, 3), 4)
_PART_POSES = ops.convert_to_numpy(
    geometric_transform(_array((2, 5, 6), 5, -1, 1))
)
_PART_FEATURES = _array((2, 5, 3), 6, -1, 1)
_PARTS = _array((2, 5, 7), 7, -1, 1)
_PRESENCE = _array((2, 5), 8, 0.05, 1)
_OBJECTS = _array((2, 3, 8), 9, -1, 1)
_SCAE_IMAGE = _array((2, 12, 12, 1), 10)

# (name, layer factory taking **kwargs such as `dtype`, input arrays).
CASES = [
    (
        "primary_caps",
        lambda **kw: PrimaryCaps(2, 4, kernel_size=3, strides=2, **kw),
        [_IMAGE],
    ),
    (
        "dense_caps",
        lambda **kw: DenseCaps(3, 5, use_bias=True, **kw),
        [_CAPSULES],
    ),
    (
        "dense_caps_leaky",
        lambda **kw: DenseCaps(3, 5, leaky_routing=True, **kw),
        [_CAPSULES],
    ),
    (
        "conv_caps",
        lambda **kw: ConvCaps(2, 4, kernel_size=3, strides=2, **kw),
        [_GRID],
    ),
    ("length", lambda **kw: Length(**kw), [_CAPSULES]),
    ("mask_by_length", lambda **kw: Mask(top_k=2, **kw), [_CAPSULES]),
    ("mask_by_labels", lambda **kw: Mask(**kw), [_CAPSULES, _LABELS]),
    (
        "primary_matrix_caps",
        lambda **kw: PrimaryMatrixCaps(2, kernel_size=3, strides=2, **kw),
        [_IMAGE],
    ),
    (
        "depthwise_primary_caps",
        lambda **kw: DepthwisePrimaryCaps(
            3, kernel_size=5, depth_multiplier=2, **kw
        ),
        [_IMAGE],
    ),
    (
        "self_attention_caps",
        lambda **kw: SelfAttentionCaps(3, 5, **kw),
        [_CAPSULES],
    ),
    (
        "em_conv_caps",
        lambda **kw: EMConvCaps(2, kernel_size=3, strides=1, **kw),
        [_POSES, _ACTIVATIONS],
    ),
    (
        "em_conv_caps_same",
        lambda **kw: EMConvCaps(
            2, kernel_size=3, strides=2, padding="same", **kw
        ),
        [_POSES, _ACTIVATIONS],
    ),
    (
        "em_class_caps",
        lambda **kw: EMClassCaps(3, **kw),
        [_POSES, _ACTIVATIONS],
    ),
    # The Stacked Capsule Autoencoder layers; a tuple of inputs is passed
    # as positional arguments.
    (
        "part_capsule_encoder",
        lambda **kw: PartCapsuleEncoder(
            num_parts=5,
            num_part_features=3,
            filters=(4, 4),
            strides=(2, 1),
            **kw,
        ),
        [_SCAE_IMAGE],
    ),
    (
        "template_decoder",
        lambda **kw: TemplateDecoder(
            output_size=(9, 9), num_parts=5, template_size=(4, 4), **kw
        ),
        (_PART_POSES, _PART_FEATURES),
    ),
    (
        "template_decoder_plain",
        lambda **kw: TemplateDecoder(
            output_size=(9, 9),
            num_parts=5,
            template_size=(4, 4),
            colorize_templates=False,
            use_alpha_channel=False,
            **kw,
        ),
        [_PART_POSES],
    ),
    (
        "set_transformer",
        lambda **kw: SetTransformer(
            num_object_capsules=3, object_capsule_dim=8, hidden_dim=4, **kw
        ),
        (_PARTS, _PRESENCE),
    ),
    (
        "set_transformer_log",
        lambda **kw: SetTransformer(
            num_object_capsules=3,
            object_capsule_dim=8,
            hidden_dim=4,
            num_heads=2,
            presence_masking="log",
            **kw,
        ),
        (_PARTS, _PRESENCE),
    ),
    (
        "object_capsule_decoder",
        lambda **kw: ObjectCapsuleDecoder(num_parts=5, hidden_dim=8, **kw),
        [_OBJECTS],
    ),
]

# Layers whose Keras sublayers compute float64 in float32 (their outputs
# stay float64), by backend and the first word of the layer's default name:
# on PyTorch Keras's `matmul`, and so its `Dense` (`TemplateDecoder`'s
# colour MLP, `SetTransformer`); on JAX its `LayerNormalization`
# (`SetTransformer`). Their float64 resolution is not checked there.
_KERAS_FLOAT32_INSIDE = {"torch": ("template", "set"), "jax": ("set",)}

# Policy: (variable dtype, compute dtype, rtol = atol against float32).
# float64 must reproduce float32 to float32's own precision. float16 keeps
# 11 significant bits (a relative step of 1e-3): 1e-2 leaves room for the
# rounding of the inputs, the weights and the convolutions and einsums that
# run in float16 before the float32 routing. bfloat16 keeps 8 bits (a step
# of 4e-3), hence 5e-2. The cases here need at most 4e-4 (float16) and
# 3e-3 (bfloat16), on every backend.
POLICIES = {
    "float64": ("float64", "float64", 1e-5),
    "mixed_float16": ("float32", "float16", 1e-2),
    "mixed_bfloat16": ("float32", "bfloat16", 5e-2),
}


def _dtype_cases(*policies):
    """The cases of `CASES` under `policies`, named by layer (and by policy
    where there are several)."""
    return [
        (
            name if len(policies) == 1 else f"{name}_{policy}",
            factory,
            inputs,
            policy,
        )
        for name, factory, inputs in CASES
        for policy in policies
    ]


def _apply(layer, inputs):
    """Calls `layer` on a single input alone, on a list of several, or on
    a tuple of them as positional arguments."""
    if isinstance(inputs, tuple):
        return layer(*inputs)
    return layer(inputs[0] if len(inputs) == 1 else list(inputs))


def _build(layer, inputs):
    """Builds `layer` by calling it on `keras.Input`s of the inputs'
    shapes and dtypes; returns the symbolic outputs."""
    symbolic = type(inputs)(
        keras.Input(batch_shape=x.shape, dtype=x.dtype) for x in inputs
    )
    return _apply(layer, symbolic)


def _call(layer, inputs):
    """Calls the built `layer` on arrays.

    On JAX, as one compiled function: op-by-op dispatch compiles every op
    of the routing loops on its own, several times slower for these tiny
    inputs. The variables are arguments of the function, mapped in a
    `StatelessScope` (as `Layer.stateless_call` maps them, but through
    `__call__`, which casts the inputs to the compute dtype). Eagerly on
    TensorFlow and PyTorch.
    """
    if keras.backend.backend() != "jax":
        return _apply(layer, inputs)
    import jax  # noqa: TID251

    variables = layer.trainable_variables + layer.non_trainable_variables
    if layer not in _JITTED:

        def call(values, inputs):
            with keras.StatelessScope(state_mapping=zip(variables, values)):
                return _apply(layer, inputs)

        _JITTED[layer] = jax.jit(call)
    return _JITTED[layer]([v.value for v in variables], inputs)


# The compiled call of each layer, compiled once per input shape.
_JITTED = weakref.WeakKeyDictionary()


def _reference(factory, inputs):
    """The float32 layer of a case, built once for its three policies
    (which set all its weights), so that JAX compiles its call once."""
    if factory not in _REFERENCES:
        reference = factory()
        _build(reference, inputs)
        _REFERENCES[factory] = reference
    return _REFERENCES[factory]


_REFERENCES = {}


def _dtype(x):
    return keras.backend.standardize_dtype(x.dtype)


def _to_float32(outputs):
    return [
        ops.convert_to_numpy(ops.cast(x, "float32"))
        for x in keras.tree.flatten(outputs)
    ]


def _float64_scope(policy):
    """JAX truncates float64 to float32 unless `jax_enable_x64` is set
    (`JAX_ENABLE_X64=1`): the float64 cases switch it on for their own
    float64 computations only."""
    if policy == "float64" and keras.backend.backend() == "jax":
        # A test-only switch with no Keras equivalent.
        import jax  # noqa: TID251

        return jax.enable_x64(True)
    return contextlib.nullcontext()


class DtypeTest(TestCase):
    # Half precision, where the backends' kernels differ, on every backend.
    @parameterized.named_parameters(
        _dtype_cases("mixed_float16", "mixed_bfloat16")
    )
    @backend_marks.COMPILED
    def test_half_precision(self, factory, inputs, policy):
        self._check_dtype(factory, inputs, policy)

    # float64, the same casts in the layers' code, on the primary backend.
    @parameterized.named_parameters(_dtype_cases("float64"))
    @pytest.mark.primary_backend
    def test_float64(self, factory, inputs, policy):
        self._check_dtype(factory, inputs, policy)

    def _check_dtype(self, factory, inputs, policy):
        variable_dtype, compute_dtype, tolerance = POLICIES[policy]
        with _float64_scope(policy):
            # Keras casts float inputs to the compute dtype itself; float64
            # inputs go in as float64 so that nothing is rounded to float32.
            if policy == "float64":
                inputs = type(inputs)(x.astype("float64") for x in inputs)
            layer = factory(dtype=policy)
            self.assertEqual(layer.dtype_policy.name, policy)
            symbolic = _build(layer, inputs)
            for i, output in enumerate(keras.tree.flatten(symbolic)):
                if keras.backend.is_float_dtype(output.dtype):
                    self.assertEqual(
                        _dtype(output), compute_dtype, f"symbolic output {i}"
                    )
            # Every variable, those of sublayers included.
            for weight in layer.weights:
                if keras.backend.is_float_dtype(weight.dtype):
                    self.assertEqual(
                        _dtype(weight), variable_dtype, weight.path
                    )

            try:
                outputs = _call(layer, inputs)
            except RuntimeError as error:
                self._skip_missing_torch_half_kernel(error, compute_dtype)
                raise
            flat_outputs = keras.tree.flatten(outputs)
            self.assertNotEmpty(flat_outputs)
            for i, output in enumerate(flat_outputs):
                if keras.backend.is_float_dtype(output.dtype):
                    self.assertEqual(
                        _dtype(output), compute_dtype, f"output {i}"
                    )
            self.assertAllFinite(_to_float32(outputs))
            if policy == "float64":
                self._assert_resolves_float64(layer, inputs, outputs)
            weights = [np.asarray(w, "float32") for w in layer.get_weights()]
            outputs = _to_float32(outputs)

        # The same weights in a float32 layer (the global policy), out of
        # the float64 scope.
        inputs = type(inputs)(x.astype("float32") for x in inputs)
        reference = _reference(factory, inputs)
        self.assertEqual(reference.dtype_policy.name, "float32")
        reference.set_weights(weights)
        expected = _call(reference, inputs)
        self.assertAllClose(
            outputs, _to_float32(expected), atol=tolerance, rtol=tolerance
        )

    def _assert_resolves_float64(self, layer, inputs, outputs):
        """Outputs that come back as float64 but went through float32 on
        the way (an op that promotes or casts to float32) cannot see a
        change of the inputs below float32's resolution. Scaling every
        input value by its own factor in `1 + [1, 2] 1e-9` keeps the order
        of capsule lengths (`Mask`), is not undone by a layer norm, and
        changes every float64 output that depends on the inputs (those
        that a change of the inputs by half leaves as they are, such as a
        learned background, are skipped)."""
        skipped = _KERAS_FLOAT32_INSIDE.get(keras.backend.backend(), ())
        if layer.name.split("_")[0] in skipped:
            return
        rng = np.random.default_rng(0)
        factors = [rng.uniform(1.0, 2.0, x.shape) for x in inputs]

        def change(step):
            scaled = _call(
                layer,
                type(inputs)(
                    x * (1 + step * f) for x, f in zip(inputs, factors)
                ),
            )
            pairs = zip(
                keras.tree.flatten(outputs),
                keras.tree.flatten(scaled),
                strict=True,
            )
            return [
                np.max(
                    np.abs(ops.convert_to_numpy(b) - ops.convert_to_numpy(a))
                )
                if keras.backend.is_float_dtype(a.dtype)
                else None
                for a, b in pairs
            ]

        for i, (tiny, large) in enumerate(
            zip(change(1e-9), change(0.5), strict=True)
        ):
            if tiny is not None and large > 0:
                self.assertGreater(
                    tiny, 0.0, f"output {i} ignores a change of 1e-9"
                )

    def _skip_missing_torch_half_kernel(self, error, compute_dtype):
        """PyTorch on CPU lacks some float16 kernels."""
        message = str(error)
        if (
            keras.backend.backend() == "torch"
            and compute_dtype == "float16"
            and "not implemented for 'Half'" in message
        ):
            self.skipTest(f"torch CPU float16 kernel missing: {message}")
