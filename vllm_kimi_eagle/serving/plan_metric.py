"""The plugin's plan, and what each worker enacted, on the server's ``/metrics``.

One info metric, ``vllm_kimi_eagle_info`` (a gauge, one sample per worker that served a
draft the plugin decided for): 1 where vLLM enacted the plan, 0 where it did not (an
engine that starts so runs with VLLM_KIMI_EAGLE_SELF_CHECK=warn). Its labels say what an
operator asks of a running server: the draft, the class serving it, the capture ids and
how the draft's ids were read, NoPE, the rope base, the greedy shortcut, the plugin's and
vLLM's versions, the worker. Two ways to the API server, as vLLM's own metrics go:

- one API server (the default): the server's registry (``vllm_compat.METRICS_REGISTRY``)
  gets a collector that reads, at each scrape, the records the workers' self-checks wrote
  (``records``);
- API-server scale-out (``--api-server-count`` above 1, or ``PROMETHEUS_MULTIPROC_DIR``
  set): each API server builds its /metrics before the plugin loads in it, from the files
  every vLLM process writes to ``PROMETHEUS_MULTIPROC_DIR``; there each worker sets the
  metric itself (``publish``), and every API server's /metrics carries it.
"""

from __future__ import annotations

import json
import os
import tempfile
import weakref

METRIC = "vllm_kimi_eagle_info"
# Where each worker writes what its self-check read, for the server's /metrics: set by the
# speculative hook in the process that builds the config, inherited by the engine and its
# workers.
RECORDS_ENV = "VLLM_KIMI_EAGLE_ENACTED_DIR"
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


RECORDS_PREFIX = "vllm-kimi-eagle-enacted-"


def records_folder() -> str:
    """The folder this server's workers write their records to (RECORDS_ENV): made once in
    the process that builds the config, before the engine starts, named for that process
    and removed when it ends; the engine's processes inherit it. Folders of processes gone
    (ended without their exit handlers) are removed here."""
    import atexit
    import shutil

    folder = os.environ.get(RECORDS_ENV)
    mine = f"{RECORDS_PREFIX}{os.getpid()}"
    if folder and os.path.basename(folder) == mine:
        return folder  # a folder another process made (a tool's) is not this server's
    parent = tempfile.gettempdir()
    for name in os.listdir(parent):
        pid = name.removeprefix(RECORDS_PREFIX)
        if name.startswith(RECORDS_PREFIX) and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
    folder = os.path.join(parent, mine)
    os.makedirs(folder, exist_ok=True)
    os.environ[RECORDS_ENV] = folder
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_record(record: dict) -> None:
    """This worker's record, where the server's /metrics reads it (RECORDS_ENV)."""
    folder = os.environ.get(RECORDS_ENV)
    if not folder or not os.path.isdir(folder):
        return
    path = os.path.join(folder, f"{record['rank']}-{record['pid']}.json")
    with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as f:
        json.dump(record, f)
    os.replace(f.name, path)


def records(folder: str | None = None) -> list[dict]:
    """Every worker's record of this server (RECORDS_ENV), oldest first."""
    folder = folder or os.environ.get(RECORDS_ENV)
    if not folder or not os.path.isdir(folder):
        return []
    found = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json"):
            try:
                with open(os.path.join(folder, name)) as f:
                    found.append(json.load(f))
            except (OSError, ValueError):
                continue
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

        if multiprocess():
            return
        family = GaugeMetricFamily(
            METRIC, "What vllm-kimi-eagle decided for the EAGLE3 draft, per worker: 1 where "
            "vLLM enacted it (its self-check), 0 where it did not.", labels=LABELS)
        for labels, value in samples(records(),
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
