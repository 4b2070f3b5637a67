"""What a measuring process reads of itself, without a framework (so that
`official_codes.py` runs it under Python 3.7 with TensorFlow 1): its peak
memory, the CPU's name, and the median of timed calls."""

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


def median_call(fn, steps):
    """Calls `fn()` `steps` times; returns the median of their seconds and
    every one."""
    durations = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        durations.append(time.perf_counter() - start)
    return statistics.median(durations), durations
