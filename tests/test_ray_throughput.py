"""tools/ray_throughput.py's arithmetic (its runs start Ray and predict thousands of rows: the tool's own run)."""
import pytest

from conftest import load_tool


def test_rows_that_cost_less_than_the_noise_of_start_up_are_refused_not_printed_as_negative_times():
    # a quick run (8 rows against 4) took 132.6 s and 320.1 s on Ray: the tool printed an overhead per row of
    # -46874.51 ms and a start-up of 507.7 s
    tool = load_tool("ray_throughput")
    assert tool.per_row_seconds("single process", small=2.0, full=5.0, small_rows=200, rows=500) == pytest.approx(0.01)
    with pytest.raises(ValueError, match=r"ray, 1 worker: its 8 rows took no longer than its 4 rows \(132.6 s "
                                         r"against 320.1 s\).*more --rows"):
        tool.per_row_seconds("ray, 1 worker", small=320.1, full=132.6, small_rows=4, rows=8)
