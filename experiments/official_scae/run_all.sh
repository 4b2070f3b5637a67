#!/bin/bash
# Compares the NumPy references of tests/references.py (scae_*) with the
# official Stacked Capsule Autoencoders code, and counts the official MNIST
# configuration's trainable parameters, in an environment with TensorFlow
# 1.15.0, dm-sonnet 1.35, tensorflow-probability 0.8 and monty (Python
# 3.7). OFFICIAL_SCAE_PARENT is the folder that holds the official code as
# stacked_capsule_autoencoders/ (default /tmp/scae_official).
#
#   python3.7 -m venv /tmp/tf115 && . /tmp/tf115/bin/activate
#   pip install tensorflow==1.15.0 dm-sonnet==1.35 \
#       tensorflow-probability==0.8.0 monty
#   bash experiments/official_scae/run_all.sh
#
# Gradient and optimizer-step parity of the whole MNIST model (ours on JAX
# and TensorFlow vs the official code): parity_export.py,
# parity_official.py and parity_compare.py, run as README.md says.
set -e
cd "$(dirname "$0")"
export PYTHONPATH="${OFFICIAL_SCAE_PARENT:-/tmp/scae_official}"
for s in check1_geom check2_warp check2b_explain check3_image check3b_bgimage check4_part check4b_tie check5_sparsity check6_attention; do
  echo "=== $s"; python $s.py 2>&1 | grep -v -i -E "warn|^\s*$" | grep -v "^   MISMATCH"
done
echo "=== count_parameters"; CUDA_VISIBLE_DEVICES= python count_parameters.py 2>/dev/null
