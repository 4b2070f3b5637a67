#!/usr/bin/env bash
# The figures to take on a GPU machine, in one command of about 6 minutes.
#
# Usage:
#   KERAS_BACKEND=jax bash benchmarks/gpu.sh OUT_DIR [--smoke] [--mnist-dir DIR]
#
# Throughput first (CapsNet at batch 100; MatrixCapsNet small and full at
# batches 32 and 64, with the accelerator's peak memory), then the learning
# runs that fit in the minutes left (MatrixCapsNet small and full, CapsNet),
# each on the four MNIST .gz files in --mnist-dir (default: the 5,000-image
# sample that ships with the package). Every result is written to OUT_DIR
# as it is measured, a JSON file per throughput point and a log per
# learning run whose every evaluation is flushed, so a run cut short still
# returns what it measured. `--smoke` takes a few steps of each, to check
# the script here on a CPU. Needs no TensorFlow: NumPy data only.
set -uo pipefail
usage="usage: benchmarks/gpu.sh OUT_DIR [--smoke] [--mnist-dir DIR]"

out=${1:?$usage}
shift
smoke=0
mnist_dir=sample
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) smoke=1 ;;
        --mnist-dir) mnist_dir=$(realpath "${2:?$usage}"); shift ;;
        *) echo "unknown argument: $1; $usage" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$out"
out=$(realpath "$out")
cd "$(dirname "$0")/.."
export KERAS_BACKEND=${KERAS_BACKEND:-jax}
budget=${GPU_BUDGET_S:-330}
deadline=$(( $(date +%s) + budget ))

# Runs "$@" with what is left of the budget; logs to $out/$name.log.
run() {
    local name=$1; shift
    local left=$(( deadline - $(date +%s) ))
    if [ "$left" -le 10 ]; then
        echo "skipped $name: no time left" | tee -a "$out/summary.txt"
        return
    fi
    echo "=== $name (${left} s left)" | tee -a "$out/summary.txt"
    timeout "$left" "$@" > "$out/$name.log" 2>&1
    echo "$name: exit $?" | tee -a "$out/summary.txt"
}

{
    date -u
    nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null
    python -c "import keras, jax; print('keras', keras.__version__, \
'jax', jax.__version__, jax.devices())"
} > "$out/environment.txt" 2>&1

if [ "$smoke" = 1 ]; then
    timing=(--steps 1 --warmup 1)
    capsnet_batches=4; matrix_batches="2 4"
    learning=(--steps 2 --every 1 --test-images 50 --seeds 0)
else
    timing=(--steps 10 --warmup 2)
    capsnet_batches=100; matrix_batches="32 64"
    # The packaged sample holds 5,000 training images: 150 steps of 32.
    steps=600; [ "$mnist_dir" = sample ] && steps=150
    learning=(--steps "$steps" --every 50 --test-images 1000 --seeds 0)
fi

run capsnet_throughput python -m benchmarks.run --model capsnet \
    --batch "$capsnet_batches" "${timing[@]}" \
    --json "$out/capsnet_throughput.json"
# One command, so one JSON file, per point: a cut run keeps the others.
for preset in small full; do
    for batch in $matrix_batches; do
        name="matrix_capsnet_${preset}_b${batch}_throughput"
        run "$name" python -m benchmarks.run --model matrix_capsnet \
            --preset "$preset" --impl ours --batch "$batch" "${timing[@]}" \
            --json "$out/$name.json"
    done
done
for model in "matrix_capsnet --preset small" "matrix_capsnet --preset full" \
    capsnet; do
    name="learning_${model// --preset /_}"
    # shellcheck disable=SC2086
    run "$name" python -u -m benchmarks.learning_curve --model $model \
        --mnist-dir "$mnist_dir" "${learning[@]}" --json "$out/$name.json"
done
cat "$out/summary.txt"
