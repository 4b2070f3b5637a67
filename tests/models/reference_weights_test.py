"""`EfficientCapsNet.from_reference_weights`: the authors' `.h5` weight
files load into the matching preset, which then computes their network.

The files are written here in the layout of Keras 2's `save_weights`, with
random weights, and the model is compared with a NumPy transcription of
the authors' forward pass (`references.authors_efficient_capsnet`). The
smallNORB names follow the authors' published
`bin/efficient_capsnet_SMALLNORB.h5`; the MNIST ones, those their code
gives, so the two sets differ as the files may.
"""

import os

import h5py
import numpy as np
import pytest
from absl.testing import parameterized

from keras_capsules.models import EfficientCapsNet
from keras_capsules.testing import TestCase
from tests import references

# Each of the authors' graphs: input shape, first kernel size, classes and
# primary kernel size.
_GRAPHS = {
    "mnist": ((28, 28, 1), 5, 10, 9),
    "multimnist": ((36, 36, 1), 5, 10, 5),
    "smallnorb": ((48, 48, 2), 7, 5, 8),
}
# The names Keras gave the nested capsule network, its convolutions (the
# fifth inside PrimaryCaps), its normalisations, its FCCaps and the
# decoder's layers.
_CODE_NAMES = {
    "model": "Efficient_CapsNet",
    "convs": ["conv2d", "conv2d_1", "conv2d_2", "conv2d_3", "conv2d_4"],
    "norms": ["batch_normalization"]
    + [f"batch_normalization_{i}" for i in (1, 2, 3)],
    "fc_caps": "fc_caps",
    "decoder": ["dense", "dense_1", "dense_2"],
}
_NAMES = {
    "mnist": _CODE_NAMES,
    "multimnist": _CODE_NAMES,
    "smallnorb": {
        "model": "CapsNet",
        "convs": [f"conv2d_{i}" for i in range(4, 9)],
        "norms": ["instance_normalization"]
        + [f"instance_normalization_{i}" for i in (1, 2, 3)],
        "fc_caps": "digit_caps",
        "decoder": ["dense", "conv2d", "conv2d_1", "conv2d_2", "conv2d_3"],
    },
}


def _he(rng, shape):
    return rng.normal(size=shape) * np.sqrt(2.0 / np.prod(shape[:-1]))


def _random_weights(preset, seed=0):
    """Weights of the authors' network in their file's layout, scaled so
    that no squash, softmax or sigmoid saturates."""
    rng = np.random.default_rng(seed)
    image_shape, first_kernel, num_classes, primary_kernel = _GRAPHS[preset]
    channels = (image_shape[-1], 32, 64, 64, 128)
    convs, norms = [], []
    for i, size in enumerate((first_kernel, 3, 3, 3)):
        shape = (size, size, channels[i], channels[i + 1])
        convs.append((_he(rng, shape), rng.normal(0, 0.1, shape[-1:])))
        norm = [
            rng.uniform(0.5, 1.5, shape[-1:]),
            rng.normal(0, 0.1, shape[-1:]),
        ]
        if preset != "smallnorb":
            norm += [
                rng.uniform(0, 0.5, shape[-1:]),
                rng.uniform(0.5, 1.5, shape[-1:]),
            ]
        norms.append(tuple(norm))
    primary = (
        rng.normal(0, 0.3 / primary_kernel, (primary_kernel,) * 2 + (1, 128)),
        rng.normal(0, 0.1, (128,)),
    )
    fc_caps = (
        rng.normal(0, 0.3, (num_classes, 16, 8, 16)),
        rng.normal(0, 0.05, (num_classes, 16, 1)),
    )
    if preset == "smallnorb":
        sizes = [(80, 64), (3, 3, 1, 64), (3, 3, 64, 128), (3, 3, 128, 128)]
        sizes.append((3, 3, 128, 2))
    else:
        sizes = [(160, 512), (512, 1024), (1024, int(np.prod(image_shape)))]
    decoder = [(_he(rng, s), rng.normal(0, 0.1, s[-1:])) for s in sizes]
    weights = {
        "convs": convs,
        "norms": norms,
        "primary": primary,
        "fc_caps": fc_caps,
        "decoder": decoder,
    }
    # float32, as the file stores them.
    return {
        key: [tuple(np.float32(a) for a in layer) for layer in value]
        if isinstance(value, list)
        else tuple(np.float32(a) for a in value)
        for key, value in weights.items()
    }


def _capsule_layers(weights, names):
    """`[(layer name, [(weight, array)])]` of the capsule network, in the
    order of its layers."""
    layers = []
    for i, ((kernel, bias), norm) in enumerate(
        zip(weights["convs"], weights["norms"])
    ):
        layers.append((names["convs"][i], [("kernel", kernel), ("bias", bias)]))
        statistics = ("gamma", "beta", "moving_mean", "moving_variance")
        layers.append((names["norms"][i], list(zip(statistics, norm))))
    kernel, bias = weights["primary"]
    layers.append((names["convs"][4], [("kernel", kernel), ("bias", bias)]))
    kernel, prior = weights["fc_caps"]
    layers.append((names["fc_caps"], [("W", kernel), ("b", prior)]))
    return layers


def _weight_list(layers, nested):
    """`weight_names` and arrays: a nested model lists its trainable
    weights first, layer after layer, then the moving statistics."""
    entries = [
        (f"{layer}/{weight}:0", value)
        for layer, weights in layers
        for weight, value in weights
    ]
    if not nested:
        return entries
    frozen = [e for e in entries if "/moving_" in e[0]]
    return [e for e in entries if e not in frozen] + frozen


def _write(path, groups, layer_names, under=None):
    """A Keras 2 HDF5 weight file: `groups` maps a layer name to its
    weight list; the other `layer_names` have no weights."""
    with h5py.File(path, "w") as file:
        root = file if under is None else file.create_group(under)
        root.attrs["backend"] = "tensorflow"
        root.attrs["keras_version"] = "2.4.0"
        root.attrs["layer_names"] = np.array([n.encode() for n in layer_names])
        for name in layer_names:
            group = root.create_group(name)
            entries = groups.get(name, [])
            group.attrs["weight_names"] = np.array(
                [weight_name.encode() for weight_name, _ in entries]
            )
            for weight_name, value in entries:
                group.create_dataset(weight_name, data=value)
    return path


def _write_training_graph(path, preset, weights, drop=None):
    """The file the authors' code saves: the capsule network and the
    decoder nested in the training graph, less the layer `drop`."""
    names = _NAMES[preset]
    capsule_layers = [
        layer for layer in _capsule_layers(weights, names) if layer[0] != drop
    ]
    decoder_layers = [
        (name, [("kernel", kernel), ("bias", bias)])
        for name, (kernel, bias) in zip(names["decoder"], weights["decoder"])
    ]
    groups = {
        names["model"]: _weight_list(capsule_layers, nested=True),
        "Generator": _weight_list(decoder_layers, nested=True),
    }
    layer_names = ["input_2", names["model"], "input_3", "mask", "Generator"]
    return _write(path, groups, layer_names)


def _write_capsule_network(path, preset, weights, under=None):
    """The file of the capsule network saved alone: a group per layer;
    PrimaryCaps holds its inner convolution's weights."""
    names = _NAMES[preset]
    layers = _capsule_layers(weights, names)
    groups = {}
    for i, (layer, entries) in enumerate(layers):
        group = "primary_caps" if i == len(layers) - 2 else layer
        groups[group] = _weight_list([(layer, entries)], nested=False)
    layer_names = ["input_1"] + list(groups) + ["length_capsnet_output"]
    return _write(path, groups, layer_names, under)


def _images(preset, batch=2):
    rng = np.random.default_rng(1)
    return rng.uniform(size=(batch,) + _GRAPHS[preset][0]).astype("float32")


class FromReferenceWeightsTest(TestCase):
    def _path(self, name="weights.h5"):
        return os.path.join(self.get_temp_dir(), name)

    @parameterized.named_parameters(
        ("mnist", "mnist"),
        ("multimnist", "multimnist"),
        ("smallnorb", "smallnorb"),
    )
    @pytest.mark.backends("tensorflow", "torch")
    def test_computes_the_authors_network(self, preset):
        weights = _random_weights(preset)
        path = _write_training_graph(self._path(), preset, weights)
        model = EfficientCapsNet.from_reference_weights(path, preset=preset)
        images = _images(preset)
        lengths, reconstructions = references.authors_efficient_capsnet(
            images, weights, preset
        )
        # Neither uniform nor saturated, so that a wrong axis shows.
        self.assertGreater(np.ptp(lengths), 0.1)
        self.assertLess(np.max(lengths), 0.99)
        self.assertAllClose(
            model.predict(images, verbose=0), lengths, atol=1e-4, rtol=1e-4
        )
        self.assertAllClose(
            model.reconstruct(images), reconstructions, atol=1e-4, rtol=1e-4
        )

    @pytest.mark.primary_backend
    def test_capsule_network_alone_loads_and_warns(self):
        weights = _random_weights("mnist")
        path = _write_capsule_network(self._path(), "mnist", weights)
        images = _images("mnist")
        lengths, _ = references.authors_efficient_capsnet(
            images, weights, "mnist"
        )
        with self.assertWarnsRegex(UserWarning, "holds no decoder weights"):
            model = EfficientCapsNet.from_reference_weights(path)
        self.assertAllClose(
            model.predict(images, verbose=0), lengths, atol=1e-4, rtol=1e-4
        )
        # Without a decoder there is nothing to warn about (pytest turns
        # warnings into errors).
        model = EfficientCapsNet.from_reference_weights(
            path, decoder_type=None, name="classifier"
        )
        self.assertIsNone(model.decoder)
        self.assertEqual(model.name, "classifier")
        self.assertAllClose(
            model.predict(images, verbose=0), lengths, atol=1e-4, rtol=1e-4
        )

    @pytest.mark.primary_backend
    def test_whole_model_file_loads(self):
        # Keras 2's `model.save("x.h5")` keeps the weights under
        # `model_weights`.
        weights = _random_weights("smallnorb")
        path = _write_capsule_network(
            self._path(), "smallnorb", weights, under="model_weights"
        )
        model = EfficientCapsNet.from_reference_weights(
            path, preset="smallnorb", decoder_type=None
        )
        kernel, prior = weights["fc_caps"]
        self.assertAllClose(
            model.digit_caps.kernel, kernel.transpose(1, 0, 2, 3)
        )
        self.assertAllClose(model.digit_caps.prior, prior[..., 0].T)
        self.assertAllClose(
            model.primary_caps.kernel,
            weights["primary"][0].transpose(0, 1, 3, 2),
        )

    @parameterized.named_parameters(
        # The first convolution differs.
        ("smallnorb_as_mnist", "smallnorb", "mnist", {}, "conv1 needs"),
        # The convolutions agree; the primary capsules' window does not.
        ("mnist_as_multimnist", "mnist", "multimnist", {}, "primary_caps"),
        # Instance normalisation has no moving statistics.
        (
            "batch_normalization",
            "smallnorb",
            "smallnorb",
            {"normalization": "batch"},
            "instance_normalization holds the weights gamma, beta where the "
            "layer norm1 has gamma, beta, moving_mean, moving_variance",
        ),
    )
    @pytest.mark.primary_backend
    def test_file_of_another_network_is_refused(
        self, written, preset, kwargs, match
    ):
        path = _write_training_graph(
            self._path(), written, _random_weights(written)
        )
        with self.assertRaisesRegex(
            ValueError,
            f"does not hold the authors' {preset} network: .*{match}.*"
            f"Received: path='{path}'$",
        ):
            EfficientCapsNet.from_reference_weights(
                path, preset=preset, **kwargs
            )

    @parameterized.named_parameters(
        ("fc_caps", "fc_caps", "holds 0 layers with the weights W and b"),
        ("normalization", "batch_normalization_2", "has 9 layers with"),
    )
    @pytest.mark.primary_backend
    def test_file_with_a_missing_layer_is_refused(self, drop, match):
        path = _write_training_graph(
            self._path(), "mnist", _random_weights("mnist"), drop=drop
        )
        with self.assertRaisesRegex(ValueError, f"{match}.*Received: path="):
            EfficientCapsNet.from_reference_weights(path)

    @pytest.mark.primary_backend
    def test_other_files_and_arguments_are_refused(self):
        path = _write_training_graph(
            self._path(), "mnist", _random_weights("mnist")
        )
        with self.assertRaisesRegex(ValueError, "Received: preset=cifar$"):
            EfficientCapsNet.from_reference_weights(path, preset="cifar")
        with self.assertRaisesRegex(TypeError, "Received: path=None$"):
            EfficientCapsNet.from_reference_weights(None)
        missing = self._path("missing.h5")
        with self.assertRaisesRegex(FileNotFoundError, "Received: path="):
            EfficientCapsNet.from_reference_weights(missing)
        text = self._path("notes.h5")
        with open(text, "w", encoding="utf-8") as file:
            file.write("not weights")
        with self.assertRaisesRegex(ValueError, "is not an HDF5 file"):
            EfficientCapsNet.from_reference_weights(text)
        # A Keras 3 weight file has no `layer_names`.
        keras3 = self._path("model.weights.h5")
        EfficientCapsNet(decoder_type=None).save_weights(keras3)
        with self.assertRaisesRegex(
            ValueError, "not a Keras 2 HDF5 weight file.*Received: path="
        ):
            EfficientCapsNet.from_reference_weights(keras3)
        # A weight listed but not stored.
        with h5py.File(path, "a") as file:
            del file["Efficient_CapsNet/fc_caps/W:0"]
        with self.assertRaisesRegex(
            ValueError, "weight fc_caps/W:0 .* does not store it.*Received"
        ):
            EfficientCapsNet.from_reference_weights(path)
