"""The plugin's plan, and what each worker enacted, on the server's ``/metrics``.

One info metric, ``vllm_kimi_eagle_info`` (a gauge, one sample per worker that served a
draft the plugin decided for): 1 where vLLM enacted the plan, 0 where it did not (an
engine that starts so runs with VLLM_KIMI_EAGLE_SELF_CHECK=warn). Its labels say what an
operator asks of a running server: the draft, the class serving it, the capture ids and
how the draft's ids were read, NoPE, the rope base, the greedy shortcut, the plugin's and
vLLM's versions, the worker. Two ways to the API server, as vLLM's own metrics go:

- one API server (the default): the server's registry (``vllm_compat.METRICS_REGISTRY``)
  gets a collector that reads, at each scrape, the records the workers' self-checks wrote
  (``self_check.records``);
- API-server scale-out (``--api-server-count`` above 1, or ``PROMETHEUS_MULTIPROC_DIR``
  set): each API server builds its /metrics before the plugin loads in it, from the files
  every vLLM process writes to ``PROMETHEUS_MULTIPROC_DIR``; there each worker sets the
  metric itself (``publish``), and every API server's /metrics carries it.
"""

from __future__ import annotations

import weakref

METRIC = "vllm_kimi_eagle_info"
LABELS = ("draft", "worker", "draft_class", "capture_ids", "convention", "nope", "rope_theta",
          "shortcut", "self_check", "plugin_version", "vllm_version")
_REGISTERED: "weakref.WeakSet" = weakref.WeakSet()


def _words(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(map(str, value))
    return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def samples(records: list[dict], vllm_version: str) -> list[tuple]:
    """(label values, value) for each worker's record, in LABELS' order."""
    found = []
    for record in records:
        plan, differences = record["plan"], record["differences"]
        verdict = "enacted" if not differences else f"differs in {len(differences)}"
        found.append(((record["draft"], record["rank"], _words(plan["draft_class"]),
                       _words(plan["capture_ids"]), _words(plan["convention"]),
                       _words(plan["nope"]), _words(plan["rope_theta"]),
                       _words(record["enacted"].get("shortcut")), verdict,
                       record.get("plugin_version", "unknown"), vllm_version),
                      0.0 if differences else 1.0))
    return found


def multiprocess() -> bool:
    """Whether vLLM's processes share their metrics through PROMETHEUS_MULTIPROC_DIR."""
    import os

    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


_GAUGE: list = []


def publish(record: dict) -> None:
    """A worker's record as a sample of the metric, where vLLM's processes share their
    metrics through files (``multiprocess``): the API servers' /metrics read them."""
    if not multiprocess():
        return
    if not _GAUGE:
        from prometheus_client import Gauge

        _GAUGE.append(Gauge(METRIC, "What vllm-kimi-eagle decided for the EAGLE3 draft, per "
                            "worker: 1 where vLLM enacted it, 0 where it did not.",
                            labelnames=LABELS, multiprocess_mode="max"))
    from vllm_kimi_eagle.compat import vllm_compat

    for labels, value in samples([record], vllm_compat.installed_vllm_version_text()
                                 or "unknown"):
        _GAUGE[0].labels(*labels).set(value)


class PlanCollector:
    """A prometheus_client collector: the workers' records, read at each scrape (none
    where the workers publish the metric themselves: ``publish``)."""

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        from vllm_kimi_eagle.compat import vllm_compat
        from vllm_kimi_eagle.serving import self_check

        if multiprocess():
            return
        family = GaugeMetricFamily(
            METRIC, "What vllm-kimi-eagle decided for the EAGLE3 draft, per worker: 1 where "
            "vLLM enacted it (its self-check), 0 where it did not.", labels=LABELS)
        for labels, value in samples(self_check.records(),
                                     vllm_compat.installed_vllm_version_text() or "unknown"):
            family.add_metric(labels, value)
        yield family

    def describe(self):  # no samples at registration: the records come later
        return []


def _register(registry) -> None:
    if registry not in _REGISTERED:
        registry.register(PlanCollector())
        _REGISTERED.add(registry)


def install_plan_metric() -> None:
    """Add the collector to every registry vLLM's /metrics is served from, when vLLM
    imports the module that builds it."""
    from vllm_kimi_eagle.compat import patching, vllm_compat

    module_name, name = vllm_compat.METRICS_REGISTRY

    def install():
        import importlib

        module = importlib.import_module(module_name)
        original = getattr(module, name, None)
        if original is None or getattr(original, "_vllm_kimi_eagle_plan", False):
            return

        def get_registry(*args, **kwargs):
            registry = original(*args, **kwargs)
            _register(registry)
            return registry

        get_registry._vllm_kimi_eagle_plan = True
        patching.replace_attribute(module, name, get_registry)

    patching.when_imported(module_name, install)
