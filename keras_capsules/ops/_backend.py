"""Every choice that depends on the backend, made in one place.

Layers and the other ops never ask which backend runs them; where the
fastest formulation differs, they ask a function here:

- TensorFlow and JAX compile through XLA. There `EMConvCaps` routes its
  votes children first (`em/_vote_layouts.ChildrenFirst`), the layout its
  batched matmul writes, so XLA transposes neither the votes for the
  routing nor their gradient for the matmul's backward pass; every sum
  over the children is chunked (`em/_reductions`); strided convolutions are
  rewritten stride-free (`conv.conv2d`); and the models' `compile()`
  turns XLA on, which Keras' `jit_compile="auto"` leaves off for
  TensorFlow on a CPU-only machine.
- TensorFlow traces a function that creates variables a second time, and
  Keras creates the optimizer's inside the first trace of the train step:
  there the models' `compile()` creates them beforehand. Its XLA draws
  float32 uniform numbers slowly on a CPU: the SCAE's presence noise is
  drawn in float64 (`draws_uniform_in_float64`).
- PyTorch runs eagerly (or under `torch.compile`), where its own `sum` and
  strided convolution gradients are the fast paths: votes positions first
  with each pose in one piece (`em/_vote_layouts.PositionsFirst`), plain
  sums, plain `keras.ops.conv`, and padding by concatenation (`_tiles.pad`);
  the SCAE's bilinear sampler keeps its forward intermediates for its
  gradient (`_bilinear.sample_points`) instead of recomputing them.
- JAX partitions the compiled step itself under data parallelism: there
  the SCAE's bilinear sampler gathers from each image's own table of
  cells (`_bilinear.sample_points`), which keeps the batch split; TensorFlow
  and PyTorch gather faster from one table of the batch.

Symbolic tensors (functional model construction) only need shapes: they
take plain sums and `keras.ops.pad`.
"""

import keras


def backend_name():
    """The name of this backend, for records such as a preset's metadata."""
    return keras.backend.backend()


def compiles_with_xla():
    """Whether this backend compiles train steps with XLA."""
    return keras.backend.backend() in ("tensorflow", "jax")


def freezes_untracked_variables():
    """Whether a compiled train step holds a variable the model does not
    track as a constant of its trace (JAX's stateless steps), so that a
    new value is seen only after the step is traced again."""
    return keras.backend.backend() == "jax"


def retraces_variable_creation():
    """Whether a compiled function that creates variables on its first call
    is traced again (TensorFlow's `tf.function`): Keras, without a
    `tf.distribute` strategy, creates the optimizer's variables inside the
    first trace of the train step."""
    return keras.backend.backend() == "tensorflow"


def resolve_jit_compile(model, jit_compile, run_eagerly=False):
    """The `jit_compile` that the models' `compile()` pass to Keras.

    A value other than `"auto"` is the caller's and is kept. `"auto"`
    means XLA wherever the backend compiles with it: Keras' own `"auto"`
    turns XLA off for TensorFlow on a machine without a GPU, which made a
    MatrixCapsNet epoch several times slower there (docs/performance.md).
    Eagerly, under a `tf.distribute` strategy (where Keras leaves XLA off)
    and on PyTorch, Keras' `"auto"` decides.
    """
    if not (isinstance(jit_compile, str) and jit_compile == "auto"):
        return jit_compile
    if (
        run_eagerly
        or not compiles_with_xla()
        or getattr(model, "_distribute_strategy", None)
    ):
        return "auto"
    return True


def routes_children_first():
    """Whether `EMConvCaps` writes and routes its votes children first
    (`em/_vote_layouts.vote_layout` builds the layout object)."""
    return compiles_with_xla()


def gathers_per_example():
    """Whether the bilinear sampler of `ops/_bilinear.py` gathers from
    each image's own table (`keras.ops.take_along_axis`) rather than from
    one table of the whole batch.

    On JAX the per-example gather keeps the batch split under
    `keras.distribution.DataParallel`, where XLA would gather the whole
    batch's table onto every device for the flat one. TensorFlow's
    data parallelism (`tf.distribute`) runs one graph per device, and its
    `take_along_axis` gathers scalars, not rows: the flat gather with its
    hand-written scatter made the SCAE's training step 2x faster there,
    and PyTorch, which runs it eagerly, faster too.
    """
    return keras.backend.backend() == "jax"


def keeps_sampling_intermediates():
    """Whether the bilinear sampler of `ops/_bilinear.py` keeps the
    intermediates of its forward pass for its gradient (PyTorch) rather
    than reading the four neighbours again.

    Eager PyTorch makes one pass over the batch's points per operation:
    the SCAE's template warping (40 templates on a 40x40 canvas for each
    of 128 images, 8.2 M points) is most of its training step, and keeping
    the weights and differences of the neighbours halves the passes (a
    `fit` step 5-6 % faster, docs/performance.md). XLA fuses the
    recomputation into the gradient's loops, where keeping them would only
    hold more memory.
    """
    return keras.backend.backend() == "torch"


def draws_uniform_in_float64():
    """Whether uniform noise (the SCAE's presence noise) is drawn in
    float64 and cast to its dtype (TensorFlow), rather than drawn in its
    dtype.

    TensorFlow compiles a float32 uniform draw under XLA into a CPU loop
    that took 44 ms for the 167,936 numbers of the SCAE's object presence
    noise on two cores, the float64 draw 1.1 ms: the SCAE's training step
    is about a tenth faster (docs/performance.md). JAX and PyTorch draw
    float32 in about 1 ms.
    """
    return keras.backend.backend() == "tensorflow"


def chunked_sums(x):
    """Whether sums over the children of `x` take the chunked XLA form.

    A custom gradient cannot take symbolic tensors.
    """
    return compiles_with_xla() and not isinstance(x, keras.KerasTensor)


def rewrites_strided_conv(inputs):
    """Whether `conv2d` computes a strided convolution stride-free.

    XLA's CPU backend runs the input gradient of a strided convolution
    about ten times slower than the forward pass; PyTorch computes it
    natively, and is slower with the rewrite. The rewrite needs the
    spatial size.
    """
    height, width = inputs.shape[1], inputs.shape[2]
    return keras.backend.backend() != "torch" and None not in (height, width)


def pads_by_concatenation(x):
    """Whether constant padding is written as a concatenation.

    `keras.ops.pad` creates a new `Operation`, with a new unique name, on
    every call; under `torch.compile` (`jit_compile=True` on PyTorch) the
    graph then depends on Keras's global name counter and is traced again
    at every training step.
    """
    return keras.backend.backend() == "torch" and not isinstance(
        x, keras.KerasTensor
    )
