"""A replica's memory report: MLX's counters, the peak RSS and the current RSS."""

from deployments.control.agent import current_rss_bytes, memory_snapshot


def test_current_rss_reads_vmrss(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmPeak:\t 900 kB\nVmRSS:\t  2048 kB\n")
    assert current_rss_bytes(str(status)) == 2048 * 1024
    assert current_rss_bytes(str(tmp_path / "missing")) is None


def test_snapshot_has_the_current_rss():
    snapshot = memory_snapshot()
    assert snapshot["mlx_active_bytes"] >= 0
    assert snapshot["rss_bytes"] > 0 and snapshot["max_rss_bytes"] > 0
