"""pipeline.trace: PREP_TRACE events and their summary."""

from __future__ import annotations

import json

from pipeline import trace


def test_events_are_written_only_when_enabled(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    monkeypatch.setattr(trace, "_PATH", None)
    trace.event("main")
    assert not path.exists() and not trace.enabled()
    monkeypatch.setattr(trace, "_PATH", str(path))
    trace.event("unit_end", unit=3, rss_mib=trace.rss_mib())
    (e,) = [json.loads(x) for x in path.read_text().splitlines()]
    assert e["ev"] == "unit_end" and e["unit"] == 3 and e["rss_mib"] > 0 and e["t"] > 0 and e["cpu"] > 0


def test_summary_is_in_time_order_and_names_the_phases():
    parent, w1, w2 = 1, 2, 3
    events = [
        (0.0, parent, "main", {}), (0.3, parent, "tokenize", {}), (0.25, 9, "imported", {}),
        (0.4, parent, "pool_start", {}), (0.41, w1, "worker_init", {}), (0.42, w2, "worker_init", {}),
        (0.55, w1, "worker_ready", {}), (0.60, w2, "worker_ready", {}),
        (0.55, w1, "unit_start", {"unit": 0}), (0.6, w2, "unit_start", {"unit": 1}),
        (0.7, w1, "unit_end", {"unit": 0}), (0.9, w2, "unit_end", {"unit": 1}),
        (0.95, parent, "shard_placed", {"shard": "shard-000000"}), (1.0, parent, "manifest", {}),
    ]
    lines = trace.summarize([json.dumps({"t": 100 + t, "pid": pid, "ev": ev, **kw}) for t, pid, ev, kw in events])
    times = [float(x.split()[0]) for x in lines]
    assert times == sorted(times) and times[0] == 0.0
    text = "\n".join(lines)
    assert "0.250 s  forkserver: worker modules imported" in text
    assert "first worker ready (last at 0.600 s; init->ready 0.140-0.180 s)" in text
    assert "0.700 s  first unit finished (2 units; each 0.150/0.300/0.300 s min/median/max)" in text
    assert "0.900 s  last unit finished" in text and "1 shards" in text
    assert trace.summarize([]) == ["no events"]


def test_summary_ends_with_each_process_cpu_at_its_last_event():
    parent, server, w1, w2 = 1, 9, 2, 3
    events = [
        (0.0, parent, "main", 0.03), (0.2, server, "imported", 0.15), (0.3, parent, "pool_start", 0.26),
        (0.31, w1, "worker_init", 0.01), (0.32, w2, "worker_init", 0.01), (0.4, w1, "unit_end", 0.3),
        (0.7, w1, "unit_end", 0.6), (0.8, w2, "unit_end", 0.5), (1.0, parent, "manifest", 0.4),
    ]
    lines = trace.summarize([json.dumps({"t": 100 + t, "cpu": cpu, "pid": pid, "ev": ev, "unit": 0})
                             for t, pid, ev, cpu in events])
    assert lines[-1] == ("CPU by each process's last event: parent 0.400 s, forkserver 0.150 s, "
                         "workers 0.600 + 0.500 s; 1.650 s in all, over 1.000 s of wall")
    assert not any(x.startswith("CPU") for x in lines[:-1])
