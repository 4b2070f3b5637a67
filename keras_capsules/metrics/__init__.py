"""Public metrics of keras_capsules."""

from keras_capsules.metrics.clustering import bipartite_accuracy
from keras_capsules.metrics.clustering import kmeans_accuracy
from keras_capsules.metrics.top_k_exact_match import TopKExactMatch
from keras_capsules.metrics.top_k_exact_match import top_k_exact_match
