"""common/ddp/bandwidth.py's arithmetic and flags, without processes."""

from __future__ import annotations

import pytest

from common.ddp import bandwidth as bw


def test_ring_bytes_grow_to_twice_the_message():
    assert bw.ring_bytes(100, 2) == 100
    assert bw.ring_bytes(300, 3) == 400
    assert bw.ring_bytes(100, 1) == 0


def test_fit_recovers_latency_and_bandwidth():
    truth = bw.Fit(latency=0.002, bytes_per_s=12.5e6, hosts=3)
    sizes = [2**16, 2**20, 2**22]
    model = bw.fit(sizes, [truth.seconds(s) for s in sizes], hosts=3)
    assert model.latency == pytest.approx(0.002, rel=1e-6)
    assert model.bytes_per_s == pytest.approx(12.5e6, rel=1e-6)
    with pytest.raises(ValueError, match="do not grow"):
        bw.fit([1, 2], [0.5, 0.4], hosts=2)
    with pytest.raises(ValueError, match="at least two"):
        bw.fit([1], [0.5], hosts=2)


def test_implications_of_a_slow_link():
    model = bw.Fit(latency=0.001, bytes_per_s=100e6 / 8, hosts=2)  # 100 Mbit/s
    found = bw.implications(model, params=25_000_000, bucket_bytes=25 * 2**20, accumulate=4)
    # 100 MB of gradients, 4 buckets: 4 ms of latency + 100 MB / 12.5 MB/s = 8 s
    assert found.sync_seconds == pytest.approx(4 * 0.001 + 100e6 / 12.5e6)
    assert found.accumulated_seconds == pytest.approx(found.sync_seconds / 4)
    assert found.fsdp_extra_bytes == pytest.approx(0.5 * 100e6)
    assert found.fsdp_seconds > found.sync_seconds
    # 9 latencies' worth of bytes at the link's rate, per byte the ring sends
    assert found.bucket_bytes == pytest.approx(9 * 0.001 * 12.5e6)


@pytest.mark.parametrize(("argv", "message"), [
    (["--sizes", "10,abc"], "is not a list of byte counts"),
    (["--sizes", "6"], "multiple of 4"),
    (["--sizes", "64", "--repeats", "0"], "is not a positive whole number"),
])
def test_bad_flags_are_argparse_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as raised:
        bw.worker(argv)
    assert raised.value.code == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]
