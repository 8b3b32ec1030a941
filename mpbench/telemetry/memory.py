"""Training memory (docs/measurement.md): the peak while training minus what was resident at
its start.

On a CUDA device the allocator keeps exact counters; on a CPU nothing does, so a thread reads
the process's resident set size every few milliseconds. The process-lifetime `ru_maxrss` is no
use for a policy comparison: it is dominated by the framework runtime (TensorFlow alone holds
about 740 MiB whatever the policy), and it includes the data loading before training.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from mpbench.results.schema import MemoryStats

# Anonymous memory only (RSS less its file-backed and shared pages: psutil's rss - shared,
# both from /proc/self/statm): what training allocates. Pages of the libraries' code that a
# cell touches for the first time while training are not training memory, and a cell forked
# from a fork server (runner/launchers/zygote.py) touches more of them for the first time than
# a new process does: with the whole RSS, its training memory read 5-9 MiB more.
RSS_SOURCE = "process anonymous RSS sampled"
# A knob for the slow-process experiment (benchmarks/slow_processes.py, docs/measurement.md),
# not a user option: seconds between the sampling thread's reads, and 0 runs no thread at all
# (the start and end are still read, so the peak is a weaker lower bound and the record's
# sample_interval_s is null). Read here, once, when the module is imported.
INTERVAL_ENV = "MPBENCH_MEMORY_SAMPLE_INTERVAL_S"


# 20 ms: at the CPU default (mnist_dense, 64 units, batch 8192, a 6.3 ms bf16 step on a 2-core
# AMX Xeon) a read every 5 ms made the step 2.8 % slower (medians of 6 in-process rounds, load
# 0.9-1.4; float32's 10 ms step changed within its noise), every 20 ms 0.5 %: the thread
# wakes between the framework's threads on a machine with as many cores as they are. Steps
# repeat, so reads at 20 ms still land in every phase of a step over a cell's tens of steps.
def interval_from_env(default: float = 0.02) -> float:
    text = os.environ.get(INTERVAL_ENV, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{INTERVAL_ENV}={text!r}: expected seconds >= 0 (0: no thread)")
    return value


DEFAULT_INTERVAL_S = interval_from_env()


@dataclass
class TrainingMemory:
    start_bytes: int
    peak_bytes: int
    source: str
    sample_interval_s: float | None = None
    samples: int | None = None

    @property
    def training_bytes(self) -> int:
        return max(0, self.peak_bytes - self.start_bytes)


class MemorySampler:
    """Reads a memory figure on a daemon thread between `start()` and `stop()`, keeping the
    peak.

    The thread sleeps between reads, so it takes a core a fraction of a percent of the time;
    it runs beside the timed steps on purpose. A peak shorter than the interval can fall
    between two reads, so the figure is a lower bound; the record states the interval.
    """

    def __init__(
        self, read: Callable[[], int], source: str, interval_s: float = DEFAULT_INTERVAL_S
    ) -> None:
        self.interval_s = interval_s
        self.source = source
        self._read_bytes = read
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.start_bytes = 0
        self.peak_bytes = 0
        self.samples = 0

    def _read(self) -> int:
        value = int(self._read_bytes())
        self.samples += 1
        self.peak_bytes = max(self.peak_bytes, value)
        return value

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    def start(self) -> MemorySampler:
        self.start_bytes = self._read()
        if self.interval_s > 0:  # 0: no thread (INTERVAL_ENV), the two ends only
            self._thread = threading.Thread(target=self._loop, name="mpbench-memory", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> TrainingMemory:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._read()  # the state at the end counts too
        return TrainingMemory(
            self.start_bytes, self.peak_bytes, self.source, self.interval_s or None, self.samples
        )


def release_free_heap() -> bool:
    """Hand the C heap's free pages back to the system (glibc's malloc_trim(0)).

    RSS counts resident pages, not live objects: memory freed while the data was prepared
    stays resident in the heap, and training can reuse it without RSS growing. Trimming right
    before the first sample brings the start figure closer to what is live. It does not help
    where a framework pools its own buffers: TensorFlow's CPU training memory of the CIFAR
    CNN read 0-2 MiB with and without it. False where there is no glibc (macOS, musl)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):
        return False


def rss_sampler(interval_s: float = DEFAULT_INTERVAL_S) -> MemorySampler:
    """The cell process's resident set size: training memory on a CPU."""
    process = psutil.Process()
    release_free_heap()
    return MemorySampler(lambda: anonymous_rss(process), RSS_SOURCE, interval_s)


def anonymous_rss(process: psutil.Process) -> int:
    """The process's resident anonymous memory (RssAnon), in bytes."""
    memory = process.memory_info()
    return memory.rss - memory.shared


def fill(stats: MemoryStats, measured: TrainingMemory, dataset_bytes: int | None) -> MemoryStats:
    """Copy a training-memory measurement into a record's MemoryStats."""
    stats.training_bytes = measured.training_bytes
    stats.training_start_bytes = measured.start_bytes
    stats.training_peak_bytes = measured.peak_bytes
    stats.training_source = measured.source
    stats.sample_interval_s = measured.sample_interval_s
    stats.samples = measured.samples
    stats.dataset_device_bytes = dataset_bytes
    return stats
