"""Public datasets of keras_capsules.

`mnist` and `smallnorb` build `tf.data` pipelines (TensorFlow and TensorFlow
Datasets are optional extras, imported only when a pipeline is built);
`mnist.load_sample` needs only NumPy.
"""

from keras_capsules.datasets import mnist
from keras_capsules.datasets import smallnorb

__all__ = ["mnist", "smallnorb"]
