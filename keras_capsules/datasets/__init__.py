"""Public datasets of keras_capsules.

`mnist`, `multi_mnist` and `smallnorb` build `tf.data` pipelines
(TensorFlow and TensorFlow Datasets are optional extras, imported only when
a pipeline is built); `mnist.load_sample`, `mnist.read_idx`,
`multi_mnist.make_pairs` and the generators of `affine_mnist` need only
NumPy.
"""

from keras_capsules.datasets import affine_mnist
from keras_capsules.datasets import mnist
from keras_capsules.datasets import multi_mnist
from keras_capsules.datasets import smallnorb

__all__ = ["affine_mnist", "mnist", "multi_mnist", "smallnorb"]
