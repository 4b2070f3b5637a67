"""Figures of capsule networks, drawn with matplotlib (an optional extra).

Install it with `pip install keras-capsules[visualization]`. Every function
returns a `matplotlib.figure.Figure` made without pyplot, so it works
headless and leaves no global state; save it with `fig.savefig(path)`.
"""

from keras_capsules.visualization.capsnet import coupling_coefficients
from keras_capsules.visualization.capsnet import perturbation_grid
from keras_capsules.visualization.matrix_capsnet import activation_maps
from keras_capsules.visualization.reconstructions import reconstructions
from keras_capsules.visualization.stacked_capsule_autoencoder import (
    learned_templates,
)
from keras_capsules.visualization.stacked_capsule_autoencoder import (
    object_presence_by_class,
)
from keras_capsules.visualization.stacked_capsule_autoencoder import (
    part_reconstructions,
)
