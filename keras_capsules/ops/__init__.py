"""Public ops of keras_capsules."""

from keras_capsules.ops.conv import conv2d
from keras_capsules.ops.conv import depthwise_conv2d
from keras_capsules.ops.dynamic import dynamic_routing
from keras_capsules.ops.em import OFFICIAL_EM_CLASS_OPTIONS
from keras_capsules.ops.em import OFFICIAL_EM_OPTIONS
from keras_capsules.ops.em import em_conv_routing
from keras_capsules.ops.em import em_routing
from keras_capsules.ops.patches import add_coordinates
from keras_capsules.ops.patches import coordinate_grid
from keras_capsules.ops.patches import extract_capsule_patches
from keras_capsules.ops.patches import fold_capsule_patches
from keras_capsules.ops.self_attention import self_attention_routing
from keras_capsules.ops.squash import squash
