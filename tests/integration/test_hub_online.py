"""The README's main usage, a draft named by hub id and read online, through the real
huggingface_hub client against a local endpoint (tests/hub_endpoint.py; HF_ENDPOINT,
an empty HF_HOME, online): ``inspect`` and a server's start-up read ``ORG/NAME`` as they
read the folder; a missing id or a hub that does not answer is one line naming the id;
a failed read is tried again, not kept as the answer. (vLLM loading the weights through
the same endpoint: tests/e2e/test_hub_online_e2e.py.)"""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import run_cli, run_python
from tests.hub_endpoint import HubEndpoint


def online(hub: HubEndpoint, home) -> dict:
    """The environment of a user online, with nothing cached, against ``hub``."""
    return {"HF_ENDPOINT": hub.url, "HF_HOME": str(home), "HF_HUB_OFFLINE": "0",
            "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


@pytest.fixture
def hub(tiny):
    with HubEndpoint({"tiny-org/draft-output-of": os.path.join(tiny, "draft-output-of"),
                      "tiny-org/draft": os.path.join(tiny, "draft")}) as endpoint:
        yield endpoint


# What the report says of the draft itself, whatever it was read from.
SAME = ("architecture", "model_type", "mla", "layer_ids", "layer_ids_source", "convention",
        "capture_ids", "convention_rule", "training_tool", "problems", "draft_vocab_size",
        "num_aux_hidden_states", "attention", "decision")


def test_inspect_reads_a_hub_id_online_as_it_reads_the_folder(tiny, hub, tmp_path):
    target = os.path.join(tiny, "target")
    by_id = run_cli("inspect", "tiny-org/draft-output-of", "--target", target, "--json",
                    env=online(hub, tmp_path / "home"))
    assert by_id.returncode == 0, by_id.stderr[-2000:]
    by_folder = run_cli("inspect", os.path.join(tiny, "draft-output-of"), "--target", target,
                        "--json")
    ours, theirs = json.loads(by_id.stdout), json.loads(by_folder.stdout)
    assert ours["headers_from"] == "hub metadata" and ours["capture_ids"] == [2, 3, 5]
    assert {k: ours.get(k) for k in SAME} == {k: theirs.get(k) for k in SAME}
    assert ours["layout"] == theirs["layout"]
    assert any(path.endswith("/model.safetensors") for method, path in hub.requests
               if method == "GET"), "the headers were not read from the endpoint"


STARTUP = """
import json
from vllm.engine.arg_utils import EngineArgs
for _ in range(2):
    EngineArgs(model={target!r}, max_model_len=256, speculative_config={{
        "method": "eagle3", "model": "tiny-org/draft", "num_speculative_tokens": 3}}
        ).create_engine_config()
print(json.dumps({{}}))
"""


def test_a_server_reads_a_hub_draft_online_and_tries_a_failed_read_again(tiny, hub, tmp_path):
    """Two speculative configs in one process, as a server builds one and its engine
    another: the first header read fails (500 from the endpoint) and is said to be
    skipped; the second reads the headers and checks the checkpoint."""
    hub.failures["model.safetensors"] = 1
    result = run_python(STARTUP.format(target=os.path.join(tiny, "target")),
                        env=online(hub, tmp_path / "home"))
    log = result["_log"]
    assert "vLLM will capture the inputs of layers [2, 3, 5]" in log
    skipped = log.index("pre-serve checkpoint check of tiny-org/draft skipped: the hub's "
                        "safetensors metadata could not be read")
    checked = log.index("draft checkpoint tiny-org/draft checked against its config (headers "
                        "from the hub metadata): no problem.")
    assert skipped < checked and hub.failures["model.safetensors"] == 0


def the_tools_lines(proc) -> list[str]:
    """What the tool itself printed on stderr (huggingface_hub adds its progress bars and
    retry notes there), and no traceback."""
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return [line for line in proc.stderr.splitlines() if line.startswith("vllm-kimi-eagle")]


def test_a_missing_id_or_a_hub_that_does_not_answer_is_one_line(tiny, hub, tmp_path):
    missing = run_cli("inspect", "tiny-org/no-such-draft", env=online(hub, tmp_path / "a"))
    assert missing.returncode == 2, missing.stdout + missing.stderr
    (line,) = the_tools_lines(missing)
    assert "tiny-org/no-such-draft" in line and "the hub has no such model" in line, line
    hub.hang = 3
    silent = run_cli("inspect", "tiny-org/draft", env={
        **online(hub, tmp_path / "b"), "HF_HUB_ETAG_TIMEOUT": "1",
        "HF_HUB_DOWNLOAD_TIMEOUT": "1"}, timeout=300)
    assert silent.returncode == 2, silent.stdout + silent.stderr
    (line,) = the_tools_lines(silent)
    assert "tiny-org/draft: could not be fetched from the hub" in line, line
