"""bench/wake.py's probes: each reports a time per probe, whatever the pause."""

from __future__ import annotations

from bench.wake import probe


async def test_each_probe_reports_its_median() -> None:
    got = await probe(0.0)
    assert set(got) == {"round trip", "4 KiB pages", "2 MiB pages"}
    assert all(ms > 0 for ms in got.values())
