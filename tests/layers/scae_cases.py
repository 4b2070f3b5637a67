"""Shapes and inputs shared by the tests of the Stacked Capsule
Autoencoder layers, and the official MNIST variable shapes."""

import math

import numpy as np

# The trainable variables of the official MNIST configuration, as
# docs/design/scae_official_variables.md derives them from the official
# code (akosiorek/stacked_capsule_autoencoders at c3afa83): shapes of each
# module, not computed by this package.
OFFICIAL_SHAPES = {
    # primary.py:68 (ConvNet2D of model_config.py:98-103), 80, 88.
    "part_encoder": [(3, 3, 1, 128), (128,)]
    + [(3, 3, 128, 128), (128,)] * 3
    + [(5, 5, 128), (1, 1, 128, 960), (960,)],
    # primary.py:173-174, 190-194, 202-203, 250, 265-266.
    "template_decoder": [
        (1, 40, 11, 11, 1),
        (1, 40, 11, 11, 1),
        (16, 32),
        (32,),
        (32, 1),
        (1,),
        (1,),
        (1,),
    ],
    # attention.py:52 (input Linear); 3 blocks of q, k, v Linears
    # (:115-117, 121), the output Linear (:126), LayerNorm (:153), MLP
    # [32, 16] (:155), LayerNorm (:163); :64 (output Linear), :66-67
    # (inducing points), :70 (pooling attention, 4 Linears).
    "object_encoder": [(144, 16), (16,)]
    + [
        (16, 16),
        (16,),
        (16, 16),
        (16,),
        (16, 16),
        (16,),
        (16, 16),
        (16,),
        (16,),
        (16,),
        (16, 32),
        (32,),
        (32, 16),
        (16,),
        (16,),
        (16,),
    ]
    * 3
    + [(16, 256), (256,), (1, 32, 256)]
    + [(256, 256), (256,)] * 4,
    # BatchMLPs at capsule.py:103 and 134 (neural.py:73, 87-89, 119-126);
    # AddBias capsule.py:143; cpr_static capsule.py:149-151; dummy_vote
    # capsule.py:420.
    "object_decoder": [
        (1, 32, 256, 128),
        (32, 128),
        (1, 32, 128, 32),
        (32, 32),
        (1, 32, 33, 128),
        (32, 128),
        (1, 32, 128, 327),
        (32, 1, 6),
        (32, 1),
        (32, 40),
        (32, 40),
        (1, 32, 40, 6),
        (1, 1, 40, 6),
    ],
    # probe.py:31, called at scae.py:303-312.
    "probes": [(32, 10), (10,), (32, 10), (10,)],
}


# A small network of the official design, for the model's tests.
SMALL_MODEL = dict(
    image_shape=(28, 28, 1),
    num_parts=6,
    num_object_capsules=4,
    template_size=(7, 7),
    num_part_features=4,
    object_capsule_dim=8,
    seed=0,
)


# The standard deviation of a unit normal truncated at two: that of
# `initializers.FanInTruncatedNormal` (Sonnet's default) times sqrt(fan_in).
TRUNCATED_STD = 0.87962566103423978


def official_fan_ins():
    """`(shape, fan-in)` of every kernel of the official MNIST model, from
    docs/design/scae_official_variables.md: Sonnet's `Linear` and `Conv2D`
    take all axes but the last; the object decoder's `BatchLinear` kernels
    `(1, capsules, inputs, units)` take `inputs`."""
    found = []
    for module, shapes in OFFICIAL_SHAPES.items():
        if module == "object_decoder":
            # The kernels of the two BatchMLPs; the others are biases,
            # the static relations and `dummy_vote`.
            found += [(shapes[i][1:], shapes[i][-2]) for i in (0, 2, 4, 6)]
            continue
        found += [
            (shape, math.prod(shape[:-1]))
            for shape in shapes
            if len(shape) == 2 or len(shape) == 4
        ]
    return found


def official_count(module):
    return sum(int(np.prod(shape)) for shape in OFFICIAL_SHAPES[module])


def images(batch=2, size=40, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(size=(batch, size, size, 1)).astype("float32")


def run_layer_test_cases():
    """`(name, layer class, init kwargs, input data, expected output
    shapes)` for `TestCase.run_layer_test`: small layers, noise on."""
    from keras import ops

    from keras_capsules import layers
    from keras_capsules.ops import geometric_transform

    rng = np.random.default_rng(0)
    poses = ops.convert_to_numpy(
        geometric_transform(rng.uniform(-1, 1, (2, 5, 6)).astype("float32"))
    )
    features = rng.uniform(-1, 1, (2, 5, 3)).astype("float32")
    return [
        (
            "part_capsule_encoder",
            layers.PartCapsuleEncoder,
            dict(
                num_parts=5,
                num_part_features=3,
                filters=(4, 4),
                strides=(2, 1),
                seed=1,
            ),
            images(batch=2, size=12),
            {
                "features": (2, 5, 3),
                "poses": (2, 5, 6),
                "presence": (2, 5),
                "presence_logits": (2, 5),
            },
        ),
        (
            "template_decoder",
            layers.TemplateDecoder,
            dict(output_size=(9, 9), num_parts=5, template_size=(4, 4), seed=2),
            (poses, features),
            {
                "background": (1,),
                "background_logit": (1,),
                "source_templates": (2, 5, 4, 4, 1),
                "template_logits": (2, 5, 9, 9, 1),
                "templates": (2, 5, 9, 9, 1),
            },
        ),
        (
            "set_transformer",
            layers.SetTransformer,
            dict(num_object_capsules=3, object_capsule_dim=8, hidden_dim=4),
            (
                rng.uniform(-1, 1, (2, 5, 7)).astype("float32"),
                rng.uniform(0.05, 1, (2, 5)).astype("float32"),
            ),
            (2, 3, 8),
        ),
        (
            "object_capsule_decoder",
            layers.ObjectCapsuleDecoder,
            dict(num_parts=5, hidden_dim=8, seed=3),
            rng.uniform(-1, 1, (2, 3, 8)).astype("float32"),
            {
                "dynamic_l2": (2,),
                "poses": (2, 3, 6),
                "presence": (2, 3),
                "vote_presence": (2, 3, 5),
                "vote_scales": (2, 3, 5),
                "votes": (2, 3, 5, 6),
            },
        ),
    ]
