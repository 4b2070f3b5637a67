"""What a measuring process reads of itself, without a framework (so that
`official_codes.py` runs it under Python 3.7 with TensorFlow 1): its peak
memory, the CPU's name, and the timing of a training or inference call."""

import resource
import statistics
import time


def peak_rss_mib():
    """Peak resident set size of this process, in MiB.

    Linux's `VmHWM`: a process started by `exec` starts it afresh, whereas
    `getrusage`'s `ru_maxrss` (the fallback elsewhere) keeps the peak of
    the parent that forked it.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cpu_model():
    """The CPU's model name, as `lscpu` shows it (None if unknown)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _time_calls(fn, steps, warmup):
    """The first call's seconds, then the median and every one of `steps`
    timed calls after `warmup - 1` more untimed ones."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    for _ in range(max(warmup - 1, 0)):
        fn()
    durations = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        durations.append(time.perf_counter() - start)
    return first, statistics.median(durations), durations


def train_timing(step, images, steps, warmup):
    """Times `step()`, one training step on a fixed batch of `images`
    images (it must wait for its own completion): the first (compiling)
    call, the median of `steps` calls after `warmup` in all, images per
    second and every timed call, under the runner's row keys."""
    first, median, durations = _time_calls(step, steps, warmup)
    return {
        "compile_seconds": first,
        "step_seconds": median,
        "train_images_per_second": images / median,
        "train_step_seconds_all": durations,
    }


def predict_timing(call, images, steps, warmup):
    """As `train_timing`, for one inference call, under the prediction
    keys of a row."""
    first, median, durations = _time_calls(call, steps, warmup)
    return {
        "predict_compile_seconds": first,
        "predict_seconds": median,
        "inference_images_per_second": images / median,
        "predict_seconds_all": durations,
    }
