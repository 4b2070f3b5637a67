"""What the scripts that build the official MNIST graph share (Python 3.7).

`stub_unused_imports()` puts an empty module in place of each import the
official code makes at module level but the graph never uses (plotting,
clustering, image summaries, the data sets), when the environment lacks
it. `RUN_MNIST` holds the flags of the official run_mnist.sh (the
undefined `--prior_within_example_constant` is dropped by parsing with
`known_only=True`).
"""

import sys
import types

_UNUSED = [
    ("matplotlib", {}),
    ("matplotlib.pyplot", {}),
    ("sklearn", {}),
    ("sklearn.manifold", {"TSNE": None}),
    ("sklearn.cluster", {}),
    ("scipy", {}),
    ("scipy.optimize", {"linear_sum_assignment": None}),
    ("PIL", {}),
    ("PIL.Image", {}),
    ("tensorflow_datasets", {}),
]

RUN_MNIST = [
    "--name=mnist",
    "--model=scae",
    "--dataset=mnist",
    "--batch_size=128",
    "--lr=3e-5",
    "--use_lr_schedule=True",
    "--canvas_size=40",
    "--n_part_caps=40",
    "--n_obj_caps=32",
    "--colorize_templates=True",
    "--use_alpha_channel=True",
    "--posterior_between_example_sparsity_weight=0.2",
    "--posterior_within_example_sparsity_weight=0.7",
    "--prior_between_example_sparsity_weight=0.35",
    "--prior_within_example_constant=4.3",
    "--prior_within_example_sparsity_weight=2.",
    "--color_nonlin=sigmoid",
    "--template_nonlin=sigmoid",
]


def stub_unused_imports():
    for name, attrs in _UNUSED:
        try:
            __import__(name)
        except ImportError:
            module = types.ModuleType(name)
            module.__dict__.update(attrs)
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)
