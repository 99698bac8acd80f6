"""What /metrics serves besides the components' families: the process, and nothing extra."""

from __future__ import annotations

from prometheus_client import Counter, generate_latest

from linkerd_config.app import new_registry


def test_the_registry_has_process_metrics_and_no_created_series() -> None:
    registry = new_registry()
    Counter("probe_total", "a counter", registry=registry).inc()
    text = generate_latest(registry).decode()
    assert "process_cpu_seconds_total" in text
    assert "process_resident_memory_bytes" in text
    assert "probe_total 1.0" in text
    assert "_created" not in text
