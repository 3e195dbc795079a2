"""molspec_core.threads: unless told, one core is left to the rest of the machine (the module's docstring
has the measurement that made this the default); OMP_NUM_THREADS, where set, is the user's word."""
import logging
import os
import subprocess
import sys

import pytest
import torch

from molspec_core.threads import default_threads, use_threads


def test_one_core_is_left_to_the_rest_of_the_machine():
    assert default_threads(cpus=2, torch_default=2, env={}) == 1
    assert default_threads(cpus=16, torch_default=16, env={}) == 15
    assert default_threads(cpus=1, torch_default=1, env={}) == 1  # never 0
    assert default_threads(cpus=8, torch_default=4, env={}) == 4  # torch's own count (physical cores) when lower


def test_omp_num_threads_where_set_is_kept():
    assert default_threads(cpus=2, torch_default=2, env={"OMP_NUM_THREADS": "2"}) == 2
    assert default_threads(cpus=2, torch_default=2, env={"OMP_NUM_THREADS": ""}) == 1  # set but empty: not a word


def test_use_threads_sets_torchs_count_asked_or_the_default(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("molspec_core.threads.usable_cpus", lambda: 4)
    try:
        assert use_threads(4) == 4 == torch.get_num_threads()  # asked: every CPU, if the user wants
        assert use_threads() == 3 == torch.get_num_threads()  # torch's 4, one left free
        assert use_threads() == 3  # again (the app calls it on every rerun): the same count, not one fewer
        assert use_threads(1) == 1 and use_threads() == 1  # below the default, torch's count stands
    finally:
        torch.set_num_threads(before)


def test_more_threads_than_cpus_are_set_with_a_warning(monkeypatch, caplog):
    before = torch.get_num_threads()
    monkeypatch.setattr("molspec_core.threads.usable_cpus", lambda: 2)
    try:
        with caplog.at_level(logging.WARNING, logger="molspec_core.threads"):
            assert use_threads(2) == 2 and caplog.messages == []
            assert use_threads(3) == 3 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert caplog.messages == ["3 threads on 2 CPUs: threads that outnumber the cores wait for each other at every "
                               "step (far slower); fewer would be faster"]


def test_a_negative_or_fractional_thread_count_is_refused_in_words():
    """use_threads(-1) raised torch's RuntimeError from set_num_threads."""
    import pytest

    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="threads must be a whole number, 0 \\(the default\\) or more"):
            use_threads(bad)


def test_a_numpy_whole_number_is_a_thread_count():
    """use_threads(numpy.int64(1)) (a count read from an array) was refused as no whole number."""
    import numpy as np
    import pytest

    before = torch.get_num_threads()
    try:
        assert use_threads(np.int64(1)) == 1 == torch.get_num_threads()
        with pytest.raises(ValueError, match="threads must be a whole number"):
            use_threads(np.float64(1.0))
    finally:
        torch.set_num_threads(before)


def test_a_containers_cpu_limit_bounds_the_cpus_as_its_affinity_does(tmp_path, monkeypatch):
    """A container limited to 2 CPUs (its cgroup's quota: docker --cpus 2, a Kubernetes limit) on a 64-core host sees
    all 64 in its affinity: the default was 63 threads on 2 CPUs' time, which wait for each other at every step
    (this module's docstring: 597 s against 7 s). The quota counts as CPUs, rounded up; none set, the affinity."""
    import os

    from molspec_core import threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    monkeypatch.setattr(threads, "CGROUP", tmp_path, raising=False)
    (tmp_path / "cpu.max").write_text("200000 100000\n")  # cgroup v2: quota and period, in microseconds
    assert threads.usable_cpus() == 2
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs' time counts as 2
    assert threads.usable_cpus() == 2
    (tmp_path / "cpu.max").write_text("max 100000\n")  # no limit
    assert threads.usable_cpus() == 64
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()  # cgroup v1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("400000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert threads.usable_cpus() == 4
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")  # no limit
    assert threads.usable_cpus() == 64
    monkeypatch.setattr(threads, "CGROUP", tmp_path / "absent")
    assert threads.usable_cpus() == 64  # no cgroup files (macOS, Windows): the affinity alone


FORK_AFTER_TORCH = """
import os, sys, time
import molspec_core
import torch
torch.set_num_threads(2)
torch.rand(1_000_000).exp().sum()  # a step on two threads: GNU OpenMP's pool is up
child = os.fork()
if child == 0:
    torch.rand(1_000_000).exp().sum()
    os._exit(0 if torch.get_num_threads() == 1 else 3)
deadline = time.monotonic() + 30  # a hang, not a slow step: the step takes milliseconds
while time.monotonic() < deadline:
    pid, status = os.waitpid(child, os.WNOHANG)
    if pid:
        sys.exit(os.waitstatus_to_exitcode(status))
    time.sleep(0.05)
os.kill(child, 9)
os.waitpid(child, 0)
sys.exit(2)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_process_forked_after_a_step_on_several_threads_computes_on_one():
    """A process pool forked (Linux's default) from a program that had decoded on two threads hung in its workers'
    first step forever: GNU OpenMP's threads do not survive a fork, and the child waited for them. Each forked
    child of a program that imported molspec_core computes on one thread (threads.one_thread_after_fork)."""
    done = subprocess.run([sys.executable, "-c", FORK_AFTER_TORCH], timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, ("the forked child hung" if done.returncode == 2 else done.stderr[-2000:])
