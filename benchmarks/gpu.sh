#!/usr/bin/env bash
# The figures to take on a GPU machine, in one command of about 6 minutes.
#
# Usage:
#   KERAS_BACKEND=jax bash benchmarks/gpu.sh OUT_DIR [--smoke] [--mnist-dir DIR]
#       [--skip NAME[,NAME...]]
#
# The script writes at most 9 files (summary.txt, log.txt,
# throughput.jsonl, the EfficientCapsNet run, the MultiMNIST, affine,
# viewpoint and adversarial results, and the learning run).
#
# Throughput first (CapsNet and EfficientCapsNet at batch 100), then one
# epoch of examples/efficient_capsnet_mnist.py (the authors' batch 16; its
# test accuracy line kept), then the throughput of MatrixCapsNet small and
# full at batches 32 and 64 (with the accelerator's peak memory), then a
# minute and a half each of the MultiMNIST and affine experiments of
# experiments/ (CapsNet), a minute
# of the viewpoint experiment (MatrixCapsNet), FGSM and BIM on the last two
# models, then a learning run of MatrixCapsNet small in the time left,
# each on the four MNIST .gz files in --mnist-dir (default: the
# 5,000-image sample that ships with the package). Every result is written
# to OUT_DIR as it is measured: a JSON line per throughput point, a JSON
# file per experiment and learning run (the learning runs flush every
# evaluation), and one log, so a run cut short still returns what it
# measured. `--smoke` takes a few steps of each, to check the script here
# on a CPU. `--skip` leaves out the steps whose names (as in summary.txt)
# start with one of the given names, e.g. `--skip capsnet,efficient,matrix`
# to spend the budget on the experiments after the throughput points.
# Needs no TensorFlow: NumPy data only.
set -uo pipefail
usage="usage: benchmarks/gpu.sh OUT_DIR [--smoke] [--mnist-dir DIR] [--skip NAMES]"

out=${1:?$usage}
shift
smoke=0
mnist_dir=sample
skip=()
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) smoke=1 ;;
        --mnist-dir) mnist_dir=$(realpath "${2:?$usage}"); shift ;;
        --skip) IFS=, read -ra skip <<< "${2:?$usage}"; shift ;;
        *) echo "unknown argument: $1; $usage" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$out"
out=$(realpath "$out")
cd "$(dirname "$0")/.."
export KERAS_BACKEND=${KERAS_BACKEND:-jax} PYTHONUNBUFFERED=1
# The GPU image has `python3` and no `python`.
python=${PYTHON:-python3}
budget=${GPU_BUDGET_S:-330}
deadline=$(( $(date +%s) + budget ))

# Runs "$@" (unless --skip names it) with what is left of the budget,
# killed 10 s after its deadline if it ignores the TERM signal; appends its
# output to $out/log.txt.
run() {
    local name=$1; shift
    local prefix
    for prefix in "${skip[@]}"; do
        if [[ "$name" == "$prefix"* ]]; then
            echo "skipped $name: --skip $prefix" | tee -a "$out/summary.txt"
            return
        fi
    done
    local left=$(( deadline - $(date +%s) ))
    if [ "$left" -le 10 ]; then
        echo "skipped $name: no time left" | tee -a "$out/summary.txt"
        return
    fi
    echo "=== $name (${left} s left)" | tee -a "$out/summary.txt" \
        >> "$out/log.txt"
    timeout -k 10 "$left" "$@" >> "$out/log.txt" 2>&1
    echo "$name: exit $?" | tee -a "$out/summary.txt"
}

# Appends the JSON file $1 to $out/throughput.jsonl as one line.
collect() {
    [ -f "$1" ] && "$python" -c "import json, sys; \
print(json.dumps(json.load(open(sys.argv[1]))))" "$1" \
        >> "$out/throughput.jsonl" && rm -f "$1"
}

{
    date -u
    nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null
    "$python" -c "import keras, jax; print('keras', keras.__version__, \
'jax', jax.__version__, jax.devices())"
} > "$out/summary.txt" 2>&1

if [ "$smoke" = 1 ]; then
    timing=(--steps 1 --warmup 1)
    capsnet_batches=4; matrix_batches="2 4"
    learning=(--steps 2 --every 1 --test-images 50 --seeds 0)
    multi_mnist=(--smoke)
    affine=(--smoke)
    viewpoints=(--smoke)
    adversarial=(--images 8 --epsilons 0,0.1 --bim-steps 2)
    efficient=(--smoke)
else
    timing=(--steps 10 --warmup 2)
    capsnet_batches=100; matrix_batches="32 64"
    # The packaged sample holds 5,000 training images: 150 steps of 32.
    steps=600; [ "$mnist_dir" = sample ] && steps=150
    learning=(--steps "$steps" --every 50 --test-images 1000 --seeds 0)
    multi_mnist=(--fixed-pairs --train-pairs 60000 --test-pairs 10000
        --epochs 20 --max-minutes 1.5)
    affine=(--max-minutes 1.5 --check-every 200)
    viewpoints=(--max-minutes 1 --check-every 200)
    adversarial=(--images 500 --epsilons 0,0.05,0.1,0.2,0.3 --bim-steps 5)
    efficient=(--epochs 1)
    if [ "$mnist_dir" != sample ]; then
        efficient+=(--data-dir "$mnist_dir")
        multi_mnist+=(--data-dir "$mnist_dir")
        affine+=(--data-dir "$mnist_dir")
        viewpoints+=(--data-dir "$mnist_dir")
        adversarial+=(--data-dir "$mnist_dir")
    fi
fi
tmp=$(mktemp -d)

run capsnet_throughput "$python" -m benchmarks.run --model capsnet \
    --batch "$capsnet_batches" "${timing[@]}" \
    --json "$tmp/capsnet_throughput.json"
collect "$tmp/capsnet_throughput.json"
run efficient_capsnet_throughput "$python" -m benchmarks.run \
    --model efficient_capsnet --batch "$capsnet_batches" "${timing[@]}" \
    --json "$tmp/efficient_capsnet_throughput.json"
collect "$tmp/efficient_capsnet_throughput.json"
# One epoch of the EfficientCapsNet recipe (NumPy arrays: no TensorFlow),
# its log with the test accuracy kept.
run efficient_capsnet_mnist "$python" examples/efficient_capsnet_mnist.py \
    "${efficient[@]}" --output-dir "$tmp/efficient"
grep -a "Test accuracy" "$out/log.txt" | tail -n 1 \
    > "$out/efficient_capsnet_mnist.txt"
# One command per point: a cut run keeps the others.
for preset in small full; do
    for batch in $matrix_batches; do
        name="matrix_capsnet_${preset}_b${batch}_throughput"
        run "$name" "$python" -m benchmarks.run --model matrix_capsnet \
            --preset "$preset" --impl ours --batch "$batch" "${timing[@]}" \
            --json "$tmp/$name.json"
        collect "$tmp/$name.json"
    done
done
# MultiMNIST CapsNet for a minute and a half (NumPy pairs: no TensorFlow).
run multi_mnist_capsnet "$python" experiments/multi_mnist.py --model capsnet \
    "${multi_mnist[@]}" --output-dir "$tmp/multi_mnist"
[ -f "$tmp/multi_mnist/results.json" ] &&
    cp "$tmp/multi_mnist/results.json" "$out/multi_mnist_capsnet.json"
# Affine generalisation, CapsNet for a minute and a half.
run affine_capsnet "$python" experiments/affine_mnist.py --model capsnet \
    "${affine[@]}" --output-dir "$tmp/affine"
[ -f "$tmp/affine/results.json" ] &&
    cp "$tmp/affine/results.json" "$out/affine_capsnet.json"
# Viewpoints, MatrixCapsNet for a minute.
run viewpoints_matrix_capsnet "$python" experiments/viewpoints_mnist.py \
    --model matrix_capsnet "${viewpoints[@]}" --output-dir "$tmp/viewpoints"
[ -f "$tmp/viewpoints/results.json" ] &&
    cp "$tmp/viewpoints/results.json" "$out/viewpoints_matrix_capsnet.json"
# FGSM and BIM on the two models just trained.
attacked=()
for model in affine/capsnet viewpoints/matrix_capsnet; do
    [ -f "$tmp/$model.keras" ] &&
        attacked+=(--model "${model//\//_}=$tmp/$model.keras")
done
if [ ${#attacked[@]} -gt 0 ]; then
    run adversarial "$python" experiments/adversarial.py "${attacked[@]}" \
        "${adversarial[@]}" --output-dir "$tmp/adversarial"
    [ -f "$tmp/adversarial/results.json" ] &&
        cp "$tmp/adversarial/results.json" "$out/adversarial.json"
fi
run learning_matrix_capsnet_small "$python" -u -m benchmarks.learning_curve \
    --model matrix_capsnet --preset small --mnist-dir "$mnist_dir" \
    "${learning[@]}" --json "$out/learning_matrix_capsnet_small.json"
rm -rf "$tmp"
cat "$out/summary.txt"
