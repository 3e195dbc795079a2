"""How many CPU threads torch (and the native engine's C calls, which take torch's count) compute with.

Unless told otherwise, one core is left to the rest of the machine: the app's own server, a browser, a
training run. OpenMP threads that wait for each other at every barrier lose badly to one other busy thread.
Session 68, a 2-core Intel Xeon with AVX-512, 50 USPTO-MIT queries decoded as the forward page does (beam 5,
5 writings, int8, one query at a time): beside a one-thread training run, both cores took 597 s and one
thread 7.0 s; idle, the two threads were 1.4x as fast as one (4.5 against 6.3 s). No OpenMP wait policy kept
both: a passive one made the idle run 2.5x slower, and spin counts of 1,000 and 10,000 (GOMP_SPINCOUNT) still
left it 1.5x and 5x slower than one thread beside the training run.
A process forked from one that has computed on several threads computes on one (one_thread_after_fork).
Imports nothing but torch: the training path (no RDKit) uses it too.
"""
from __future__ import annotations

import logging
import math
import numbers
import os
from collections.abc import Mapping
from pathlib import Path

import torch

log = logging.getLogger(__name__)

CGROUP = Path("/sys/fs/cgroup")  # where a container's CPU limit is read (cgroup v2's cpu.max, v1's cpu/cpu.cfs_*)


def default_threads(cpus: int, torch_default: int, env: Mapping[str, str]) -> int:
    """The thread count when none is asked for: torch's own, at most one fewer than the CPUs this process
    may run on, at least 1; torch's own where OMP_NUM_THREADS says what it should be."""
    if env.get("OMP_NUM_THREADS"):
        return torch_default
    return max(1, min(torch_default, cpus - 1))


def cpu_limit(cgroup: Path) -> int | None:
    """The CPUs a container's CPU limit gives this process (its cgroup's quota over its period, rounded up), or None
    where no limit is set or none can be read."""
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]  # cgroup v2: "200000 100000", or "max 100000"
    except (OSError, ValueError):
        try:  # cgroup v1: the quota (-1: none) and the period, a file each
            quota, period = ((cgroup / "cpu" / name).read_text().strip() for name in ("cpu.cfs_quota_us",
                                                                                       "cpu.cfs_period_us"))
        except OSError:
            return None
    if not (quota.isdigit() and period.isdigit()) or int(quota) == 0 or int(period) == 0:  # "max", "-1": no limit
        return None
    return max(1, math.ceil(int(quota) / int(period)))


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity where the OS has one, else every CPU, and no more than a
    container's CPU limit (cpu_limit), which the affinity does not show: a container given 2 CPUs of a 64-core host
    sees 64, and took 63 threads."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    limit = cpu_limit(CGROUP)
    return cpus if limit is None else min(cpus, limit)


def use_threads(threads: int = 0) -> int:
    """Set torch's CPU threads to `threads`, or with 0 to default_threads for this process; the count set.
    More threads than CPUs are set as asked, with a warning: they can only wait for each other."""
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 0:
        raise ValueError(f"threads must be a whole number, 0 (the default) or more, not {threads!r}")
    threads = int(threads)  # NumPy's whole numbers too (a count read from an array)
    cpus = usable_cpus()
    if threads > cpus:
        log.warning("%d threads on %d CPU%s: threads that outnumber the cores wait for each other at every step "
                    "(far slower); fewer would be faster", threads, cpus, "" if cpus == 1 else "s")
    count = threads or default_threads(cpus, torch.get_num_threads(), os.environ)
    torch.set_num_threads(count)
    return count


def one_thread_after_fork() -> None:
    """In a process just forked (a process pool's worker, Linux's default start), torch set to one thread. GNU
    OpenMP's threads, torch's on Linux, do not survive a fork: once the parent had computed on two, the child's first
    step on several waited for them forever (a pool's workers, loading their own model as the README advises, hung in
    their first query). One thread a worker is also what a pool of them wants; use_threads(n) in the worker asks for
    more, which hangs where the parent computed on several. molspec_core runs this in every child it is forked into
    (os.register_at_fork, in the package's __init__)."""
    torch.set_num_threads(1)
