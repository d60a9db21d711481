"""The plan on /metrics (serving/plan_metric.py), where vLLM's processes share their
metrics through PROMETHEUS_MULTIPROC_DIR (API-server scale-out): a worker's record,
published in its own process, is in the registry an API server builds from the files;
and with one API server, whose collector reads the records, nothing twice."""

from __future__ import annotations

import json

from tests.helpers import run_python

RECORD = {"draft": "/d", "rank": "tp1", "pid": 1, "plugin_version": "0.1.0",
          "differences": [], "enacted": {"shortcut": True},
          "plan": {"draft_class": "plugin", "capture_ids": [2, 3, 5], "convention": "input-of",
                   "nope": False, "rope_theta": 50000.0, "shortcut": True}}

WORKER = """
import json
from vllm_kimi_eagle.serving import plan_metric
plan_metric.publish(json.loads({record!r}))
print(json.dumps({{}}))
"""

API_SERVER = """
import json, os
from prometheus_client import generate_latest
from vllm.v1.metrics.prometheus import get_prometheus_registry
from vllm_kimi_eagle.serving import plan_metric
os.makedirs({folder!r}, exist_ok=True)
with open(os.path.join({folder!r}, "tp1-1.json"), "w") as f:
    json.dump(json.loads({record!r}), f)
os.environ[plan_metric.RECORDS_ENV] = {folder!r}
registry = get_prometheus_registry()
plan_metric._register(registry)
text = generate_latest(registry).decode()
print(json.dumps({{"lines": [l for l in text.splitlines() if l.startswith(plan_metric.METRIC)]}}))
"""


def test_a_workers_record_reaches_every_api_server_through_the_shared_files(tmp_path):
    shared = tmp_path / "prometheus"
    shared.mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(shared)}
    run_python(WORKER.format(record=json.dumps(RECORD)), env=env)
    found = run_python(API_SERVER.format(record=json.dumps(RECORD),
                                         folder=str(tmp_path / "records")), env=env)
    [line] = found["lines"]
    assert 'worker="tp1"' in line and 'capture_ids="2,3,5"' in line and line.endswith(" 1.0")


def test_one_api_server_reads_the_records_itself(tmp_path):
    found = run_python(API_SERVER.format(record=json.dumps(RECORD),
                                         folder=str(tmp_path / "records")))
    [line] = found["lines"]
    assert 'self_check="enacted"' in line and line.endswith(" 1.0")
