"""The official training setting of matrix capsules with EM routing.

From the official code (google-research, capsule_em/experiment.py and
model.py): Adam, learning rate 0.01 decayed (continuously) by 0.96 every
20k steps, batch 64. Its TensorFlow 1 Adam has epsilon 1e-8, not Keras'
1e-7, which damps the steps of the many transform entries whose gradients
are that small (docs/design/em_routing_defaults.md).
`MatrixCapsNet.compile()`, the example scripts and the benchmarks read it
here.
"""

LEARNING_RATE = 0.01
DECAY_STEPS = 20000
DECAY_RATE = 0.96
ADAM_EPSILON = 1e-8
