"""Outputs and one training step of every public op, layer and model.

A check for refactors that should not change any number: run it on the
tree before and after the change (each checkout on `PYTHONPATH`), on every
backend, and compare the two files. Every computation uses fixed inputs and
seeded weights, and only the public API, so the script runs unchanged on
both sides of a refactor.

Usage:
    KERAS_BACKEND=jax python scripts/fixed_outputs.py --output before.npz
    KERAS_BACKEND=jax python scripts/fixed_outputs.py --compare before.npz
"""

import argparse
import sys

import keras
import numpy as np
from keras import ops

import keras_capsules
from keras_capsules import layers
from keras_capsules import losses
from keras_capsules import models

EM_SETTINGS = {
    "official": {
        "routing_iterations": 3,
        "final_lambda": 0.01,
        "routing_mode": "official",
    },
    "paper": {
        "routing_iterations": 2,
        "final_lambda": 1e-3,
        "routing_mode": "paper",
    },
}
# `ops.OFFICIAL_EM_CLASS_OPTIONS`, spelled out as the settings above are.
EM_CLASS_SETTING = {
    "routing_iterations": 3,
    "final_lambda": 0.0025,
    "min_variance": 5e-4,
    "epsilon": 1e-5,
    "routing_mode": "official",
}
NORMALIZATIONS = ("official", "window", "all_parents", "reference")


def _rng(seed=0):
    return np.random.default_rng(seed)


def _array(shape, seed, low=0.0, high=1.0):
    return _rng(seed).uniform(low, high, shape).astype("float32")


def _ops_outputs():
    kc = keras_capsules.ops
    out = {}
    vectors = _array((4, 10, 8), 1, -1, 1)
    out["squash"] = kc.squash(vectors)
    out["squash_exponential"] = kc.squash(vectors, squash_form="exponential")
    out["dynamic_routing_leaky"] = kc.dynamic_routing(
        _array((4, 12, 5, 8), 2, -1, 1), leaky_routing=True
    )
    out["self_attention_routing"] = kc.self_attention_routing(
        _array((4, 12, 5, 8), 13, -1, 1), prior=_array((12, 5), 14)
    )
    out["depthwise_conv2d"] = kc.depthwise_conv2d(
        _array((2, 9, 9, 8), 15), _array((9, 9, 8, 1), 16, -0.1, 0.1)
    )
    votes = _array((4, 12, 5, 8), 2, -1, 1)
    out["dynamic_routing"] = kc.dynamic_routing(votes, routing_iterations=3)
    em_votes = _array((2, 36, 5, 16), 3, -1, 1)
    em_acts = _array((2, 36), 4)
    beta = _array((5,), 5)
    for name, setting in EM_SETTINGS.items():
        out[f"em_routing_{name}"] = kc.em_routing(
            em_votes, em_acts, beta, beta, **setting
        )
    out["em_routing_official_class"] = kc.em_routing(
        em_votes, em_acts, beta, beta, **EM_CLASS_SETTING
    )
    conv_acts = _array((2, 6, 6, 4), 6)
    for normalization in NORMALIZATIONS:
        for padding in ("valid", "same"):
            out_size = 2 if padding == "valid" else 3
            conv_votes = _array((2, out_size, out_size, 36, 3, 16), 7, -1, 1)
            for name, setting in EM_SETTINGS.items():
                out[f"em_conv_routing_{normalization}_{padding}_{name}"] = (
                    kc.em_conv_routing(
                        conv_votes,
                        conv_acts,
                        beta[:3],
                        beta[:3],
                        kernel_size=3,
                        strides=2,
                        padding=padding,
                        routing_normalization=normalization,
                        return_assignments=True,
                        **setting,
                    )
                )
    images = _array((2, 20, 20, 8), 8)
    kernel = _array((9, 9, 8, 16), 9, -0.1, 0.1)
    out["conv2d"] = kc.conv2d(images, kernel, strides=2)
    grid = _array((2, 7, 7, 4, 4, 4), 10)
    tiles = kc.extract_capsule_patches(grid, 3, strides=2, padding="same")
    out["extract_capsule_patches"] = tiles
    for reduction in ("sum", "max"):
        out[f"fold_capsule_patches_{reduction}"] = kc.fold_capsule_patches(
            tiles, (7, 7), strides=2, padding="same", reduction=reduction
        )
    out["coordinate_grid"] = kc.coordinate_grid(3, 5, coordinate_scale=0.2)
    for placement in ("official", "paper"):
        out[f"add_coordinates_{placement}"] = kc.add_coordinates(
            _array((2, 3, 3, 4, 5, 4, 4), 11), coordinate_placement=placement
        )
    labels = np.eye(5, dtype="float32")[[0, 3]]
    scores = _array((2, 5), 12)
    out["margin_loss"] = losses.margin_loss(labels, scores)
    out["spread_loss"] = losses.spread_loss(labels, scores)
    return out


def _layer_cases():
    """(name, inputs as NumPy, layer factory) for every public layer."""
    poses = _array((2, 6, 6, 4, 4, 4), 20, -1, 1)
    acts = _array((2, 6, 6, 4), 21)
    image = _array((2, 14, 14, 3), 22)
    capsules = _array((2, 16, 8), 23, -1, 1)
    grid = _array((2, 6, 6, 4, 8), 24, -1, 1)
    cases = [
        ("primary_caps", [image], lambda: layers.PrimaryCaps(4, 8, 5, 2)),
        ("dense_caps", [capsules], lambda: layers.DenseCaps(5, 6)),
        ("conv_caps", [grid], lambda: layers.ConvCaps(3, 6, 3, strides=2)),
        ("length", [capsules], layers.Length),
        ("mask", [capsules], layers.Mask),
        ("primary_matrix_caps", [image], lambda: layers.PrimaryMatrixCaps(4)),
        (
            "depthwise_primary_caps",
            [image],
            lambda: layers.DepthwisePrimaryCaps(3, kernel_size=14),
        ),
        (
            "self_attention_caps",
            [capsules],
            lambda: layers.SelfAttentionCaps(5, 6),
        ),
    ]
    for normalization in NORMALIZATIONS:
        for padding in ("valid", "same"):
            cases.append(
                (
                    f"em_conv_caps_{normalization}_{padding}",
                    [poses, acts],
                    lambda n=normalization, p=padding: layers.EMConvCaps(
                        3,
                        kernel_size=3,
                        strides=2,
                        padding=p,
                        routing_normalization=n,
                    ),
                )
            )
    official = dict(
        routing_mode="official", routing_iterations=3, final_lambda=0.01
    )
    cases.append(
        (
            "em_conv_caps_official_mode",
            [poses, acts],
            lambda: layers.EMConvCaps(3, **official),
        )
    )
    for placement in ("official", "paper"):
        cases.append(
            (
                f"em_class_caps_{placement}",
                [poses, acts],
                lambda p=placement: layers.EMClassCaps(
                    5, coordinate_placement=p
                ),
            )
        )
    cases.append(
        (
            "em_class_caps_official_mode",
            [poses, acts],
            lambda: layers.EMClassCaps(
                5, coordinate_addition=False, **official
            ),
        )
    )
    return cases


def _train_step(model, inputs, target):
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss="mse",
        jit_compile=keras.backend.backend() != "torch",
    )
    loss = model.train_on_batch(inputs, target)
    return [np.asarray(loss)] + [
        ops.convert_to_numpy(w) for w in model.trainable_weights
    ]


def _flat_model(inputs, outputs):
    if not isinstance(outputs, (list, tuple)):
        outputs = [outputs]
    flat = [keras.layers.Flatten()(o) for o in outputs]
    joined = flat[0] if len(flat) == 1 else keras.layers.Concatenate()(flat)
    return keras.Model(inputs, joined)


def _layer_outputs():
    out = {}
    for name, arrays, make_layer in _layer_cases():
        keras.utils.set_random_seed(0)
        layer = make_layer()
        inputs = [keras.Input(a.shape[1:]) for a in arrays]
        call_inputs = inputs if len(inputs) > 1 else inputs[0]
        model = _flat_model(inputs, layer(call_inputs))
        out[f"{name}_call"] = model.predict(arrays, verbose=0)
        target = _array(out[f"{name}_call"].shape, 30)
        if model.trainable_weights:
            out[f"{name}_step"] = _train_step(model, arrays, target)
    return out


def _model_outputs():
    out = {}
    images = _array((4, 28, 28, 1), 40)
    labels = np.eye(10, dtype="float32")[[1, 3, 5, 7]]
    keras.utils.set_random_seed(0)
    capsnet = models.CapsNet(image_shape=(28, 28, 1), num_classes=10)
    out["capsnet_predict"] = capsnet.predict(images, verbose=0)
    out["capsnet_reconstruct"] = capsnet.reconstruct(images)
    capsnet.compile(jit_compile=keras.backend.backend() != "torch")
    out["capsnet_step"] = [np.asarray(capsnet.train_on_batch(images, labels))]
    out["capsnet_step"] += [
        ops.convert_to_numpy(w) for w in capsnet.trainable_weights
    ]
    keras.utils.set_random_seed(0)
    matrix = models.MatrixCapsNet.from_preset(
        "tiny", image_shape=(28, 28, 1), num_classes=10
    )
    out["matrix_capsnet_predict"] = matrix.predict(images, verbose=0)
    out["matrix_capsnet_class_capsules"] = matrix.class_capsules(images)
    # The official schedule, explicitly: `compile()`'s default schedule
    # needs the length of a `fit`, and this step is a `train_on_batch`.
    matrix.compile(
        optimizer=keras.optimizers.Adam(
            keras.optimizers.schedules.ExponentialDecay(
                0.01, decay_steps=20000, decay_rate=0.96
            ),
            epsilon=1e-8,
        ),
        jit_compile=keras.backend.backend() != "torch",
    )
    out["matrix_capsnet_step"] = [
        np.asarray(matrix.train_on_batch(images, labels))
    ]
    out["matrix_capsnet_step"] += [
        ops.convert_to_numpy(w) for w in matrix.trainable_weights
    ]
    keras.utils.set_random_seed(0)
    official = models.MatrixCapsNet.from_preset(
        "tiny", image_shape=(28, 28, 1), num_classes=10, routing="official"
    )
    out["matrix_capsnet_official_predict"] = official.predict(images, verbose=0)
    keras.utils.set_random_seed(0)
    efficient = models.EfficientCapsNet()
    out["efficient_capsnet_predict"] = efficient.predict(images, verbose=0)
    out["efficient_capsnet_reconstruct"] = efficient.reconstruct(images)
    return out


def _default_training_outputs():
    """Two steps of `fit` with each model's `compile()` defaults, sized
    to the run as the recipes size them."""
    out = {}
    images = _array((4, 28, 28, 1), 40)
    labels = np.eye(10, dtype="float32")[[1, 3, 5, 7]]
    jit_compile = keras.backend.backend() != "torch"
    builders = {
        "capsnet": lambda: models.CapsNet(
            conv_filters=16, num_primary_capsules=4, decoder_units=(32,)
        ),
        "efficient_capsnet": models.EfficientCapsNet,
        "matrix_capsnet": lambda: models.MatrixCapsNet.from_preset(
            "tiny", image_shape=(28, 28, 1), num_classes=10
        ),
    }
    for name, build in builders.items():
        keras.utils.set_random_seed(0)
        model = build()
        model.compile(jit_compile=jit_compile, total_steps=2)
        history = model.fit(images, labels, batch_size=2, verbose=0)
        out[f"{name}_default_fit"] = [np.asarray(history.history["loss"])] + [
            ops.convert_to_numpy(w) for w in model.weights
        ]
    return out


# The Stacked Capsule Autoencoder: a small network, the presence noise
# off so that no value depends on how noise is drawn. Its weights are
# written with its outputs; `--compare` loads them before computing, so
# that a change of initialisation or of variable order does not hide a
# change of the maths.
SCAE_CONFIG = dict(
    image_shape=(28, 28, 1),
    num_parts=6,
    num_object_capsules=4,
    template_size=(7, 7),
    num_part_features=4,
    object_capsule_dim=8,
    noise_scale=0.0,
    seed=0,
)


def _scae_ops_outputs():
    kc = keras_capsules.ops
    out = {}
    params = _array((3, 5, 6), 50, -1, 1)
    out["scae_geometric_transform"] = kc.geometric_transform(params)
    out["scae_geometric_transform_similarity_matrix"] = kc.geometric_transform(
        params, similarity=True, as_matrix=True
    )
    poses = kc.geometric_transform(params)
    out["scae_affine_sampling_grid"] = kc.affine_sampling_grid(
        poses, (12, 12), (5, 5)
    )
    templates = _array((3, 5, 5, 5, 2), 51)
    out["scae_bilinear_sample"] = kc.bilinear_sample(
        _array((3, 6, 6, 2), 52), _array((3, 10, 2), 53, -1, 7)
    )
    warped = kc.warp_templates(templates, poses, (12, 12))
    out["scae_warp_templates"] = warped
    images = _array((3, 12, 12, 2), 54)
    mixture = (
        warped,
        _array((3, 5, 12, 12, 1), 55, -2, 2),
        _array((3, 5), 56),
        _array((1,), 57),
        _array((1,), 58, 0.1, 1),
    )
    out["scae_template_mixture_log_likelihood"] = (
        kc.template_mixture_log_likelihood(images, *mixture)
    )
    out["scae_template_mixture_mode"] = kc.template_mixture_mode(
        *mixture, return_components=True
    )
    part_poses = _array((3, 5, 6), 59, -1, 1)
    votes = _array((3, 4, 5, 6), 60, -1, 1)
    scales = _array((3, 4, 5), 61, 0.1, 2)
    presence = _array((3, 4, 5), 62)
    for normalize in (False, True):
        out[f"scae_part_pose_log_likelihood_{normalize}"] = (
            kc.part_pose_log_likelihood(
                part_poses,
                votes,
                scales,
                presence,
                _array((3, 5), 63),
                normalize_mixing=normalize,
                return_winners=True,
            )
        )
    for kind in ("l2", "entropy"):
        out[f"scae_capsule_sparsity_{kind}"] = kc.capsule_sparsity(
            _array((8, 4), 64), kind
        )
    return out


def _scae_layer_cases():
    """(name, inputs as NumPy, layer factory) for the SCAE's layers."""
    images = _array((3, 28, 28, 1), 70)
    poses = keras_capsules.ops.geometric_transform(_array((3, 6, 6), 71, -1, 1))
    poses = ops.convert_to_numpy(poses)
    features = _array((3, 6, 4), 72, -1, 1)
    parts = _array((3, 6, 9), 73, -1, 1)
    presence = _array((3, 6), 74)
    objects = _array((3, 4, 8), 75, -1, 1)
    return [
        (
            "scae_part_capsule_encoder",
            [images],
            lambda: layers.PartCapsuleEncoder(
                num_parts=6, num_part_features=4, noise_scale=0.0
            ),
        ),
        (
            "scae_template_decoder",
            [poses, features],
            lambda: layers.TemplateDecoder(
                output_size=(28, 28),
                num_parts=6,
                template_size=(7, 7),
            ),
        ),
        (
            "scae_set_transformer",
            [parts, presence],
            lambda: layers.SetTransformer(
                num_object_capsules=4, object_capsule_dim=8
            ),
        ),
        (
            "scae_set_transformer_log",
            [parts, presence],
            lambda: layers.SetTransformer(
                num_object_capsules=4,
                object_capsule_dim=8,
                presence_masking="log",
            ),
        ),
        (
            "scae_object_capsule_decoder",
            [objects],
            lambda: layers.ObjectCapsuleDecoder(num_parts=6, noise_scale=0.0),
        ),
    ]


def _scae_model():
    return models.StackedCapsuleAutoencoder(**SCAE_CONFIG)


def _saved_weights(reference, name):
    """The weights `name` was computed with, from a `--compare` file."""
    count = int(reference[f"{name}_weights/0"])
    return [reference[f"{name}_weights/{i + 1}"] for i in range(count)]


def _scae_outputs(reference=None):
    out = {}
    for name, arrays, make_layer in _scae_layer_cases():
        keras.utils.set_random_seed(0)
        layer = make_layer()
        outputs = layer(*arrays)
        if reference is not None:
            layer.set_weights(_saved_weights(reference, name))
            outputs = layer(*arrays)
        weights = layer.get_weights()
        out[f"{name}_weights"] = [np.asarray(len(weights))] + weights
        if isinstance(outputs, dict):
            for key, value in outputs.items():
                out[f"{name}_call_{key}"] = value
        else:
            out[f"{name}_call"] = outputs
    images = _array((4, 28, 28, 1), 76)
    labels = np.array([1, 3, 5, 7])
    jit_compile = keras.backend.backend() != "torch"
    for step, optimizer in (
        ("default", lambda: "auto"),
        ("sgd", lambda: keras.optimizers.SGD(0.01)),
    ):
        for with_labels in (False, True):
            name = f"scae_model_{step}_{'labels' if with_labels else 'images'}"
            keras.utils.set_random_seed(0)
            model = _scae_model()
            if reference is not None:
                # By path below the model's name (which some Keras
                # versions put in front): the order of the weights may
                # differ between versions.
                prefix = f"{model.name}/"

                def below_model(path):
                    path = str(path)
                    if path.startswith(prefix):
                        return path[len(prefix) :]
                    return path

                saved = dict(
                    zip(
                        [
                            below_model(path)
                            for path in reference["scae_model_weight_paths"]
                        ],
                        _saved_weights(reference, "scae_model"),
                    )
                )
                for weight in model.weights:
                    weight.assign(saved[below_model(weight.path)])
            if step == "default" and not with_labels:
                weights = model.get_weights()
                out["scae_model_weights"] = [np.asarray(len(weights))]
                out["scae_model_weights"] += weights
                out["scae_model_weight_paths"] = np.array(
                    [w.path for w in model.weights]
                )
                predicted = model.predict(images, verbose=0)
                for key, value in predicted.items():
                    out[f"scae_model_predict_{key}"] = value
                out["scae_model_reconstruct"] = model.reconstruct(
                    images, return_parts=True
                )
            model.compile(optimizer=optimizer(), jit_compile=jit_compile)
            logs = model.train_on_batch(
                images, labels if with_labels else None, return_dict=True
            )
            for key, value in logs.items():
                out[f"{name}_log_{key}"] = np.asarray(value)
            out[f"{name}_weights_after"] = model.get_weights()
            out[f"{name}_optimizer"] = [
                ops.convert_to_numpy(v) for v in model.optimizer.variables
            ]
    return out


def _flatten(results):
    arrays = {}
    for name, value in results.items():
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                arrays[f"{name}/{i}"] = ops.convert_to_numpy(item)
        else:
            arrays[name] = ops.convert_to_numpy(value)
    return arrays


def compute(reference=None):
    results = {}
    results.update(_ops_outputs())
    results.update(_layer_outputs())
    results.update(_model_outputs())
    results.update(_default_training_outputs())
    results.update(_scae_ops_outputs())
    results.update(_scae_outputs(reference))
    return _flatten(results)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--output", help="write the arrays to this .npz file")
    group.add_argument("--compare", help="compare with this .npz file")
    args = parser.parse_args(argv)
    print(f"backend: {keras.backend.backend()}")
    reference = np.load(args.compare) if args.compare else None
    arrays = compute(reference)
    if args.output:
        np.savez(args.output, **arrays)
        print(f"{len(arrays)} arrays written to {args.output}")
        return 0
    differ = 0
    for name in sorted(set(reference.files) | set(arrays)):
        if name not in arrays or name not in reference.files:
            print(f"only on one side: {name}")
            differ += 1
            continue
        a, b = reference[name], arrays[name]
        numeric = a.dtype.kind in "fiub" and b.dtype.kind in "fiub"
        same = a.shape == b.shape and (
            np.array_equal(a, b, equal_nan=True)
            if numeric
            else np.array_equal(a, b)
        )
        if not same:
            if a.shape != b.shape:
                diff = "shape"
            elif a.dtype.kind not in "fiu":
                diff = "text"
            else:
                a, b = a.astype("float64"), b.astype("float64")
                scale = np.maximum(np.abs(a), np.abs(b))
                relative = np.abs(a - b) / np.where(scale > 0, scale, 1)
                diff = (
                    f"{np.max(np.abs(a - b)):.3g} absolute, "
                    f"{np.max(relative):.3g} relative"
                )
            print(f"differs: {name} (max {diff})")
            differ += 1
    names = set(reference.files) | set(arrays)
    print(f"{len(names) - differ} of {len(names)} arrays bit-identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
