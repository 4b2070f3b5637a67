"""Public layers of keras_capsules."""

from keras_capsules.layers.conv_caps import ConvCaps
from keras_capsules.layers.dense_caps import DenseCaps
from keras_capsules.layers.depthwise_primary_caps import DepthwisePrimaryCaps
from keras_capsules.layers.em_class_caps import EMClassCaps
from keras_capsules.layers.em_conv_caps import EMConvCaps
from keras_capsules.layers.length import Length
from keras_capsules.layers.mask import Mask
from keras_capsules.layers.object_capsule_decoder import ObjectCapsuleDecoder
from keras_capsules.layers.part_capsule_encoder import PartCapsuleEncoder
from keras_capsules.layers.primary_caps import PrimaryCaps
from keras_capsules.layers.primary_matrix_caps import PrimaryMatrixCaps
from keras_capsules.layers.self_attention_caps import SelfAttentionCaps
from keras_capsules.layers.set_transformer import SetTransformer
from keras_capsules.layers.template_decoder import TemplateDecoder
