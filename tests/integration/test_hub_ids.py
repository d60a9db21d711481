"""Models named as vLLM takes them: hub ids found in the Hugging Face cache, offline.

The tiny models are placed in a Hugging Face cache layout (refs/main naming a snapshot
whose files link to the built ones) and every tool is given ids with HF_HUB_OFFLINE=1: no
network, no mock. An id that is not cached is one line and exit 2, never a traceback.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import HF_COMMIT, place_in_hf_cache, probe_engine_config, run_cli
from vllm_kimi_eagle.fixtures import kimi_cost

# hub id -> tiny folder name
REPOS = {"tiny-org/kimi-cost-target": kimi_cost.NAME,
         "tiny-org/kimi-cost-draft-output-of": "draft-kimi-cost-output-of",
         "tiny-org/target": "target",
         "tiny-org/draft": "draft"}
MISSING = "tiny-org/not-downloaded"


@pytest.fixture(scope="module")
def hub(tiny, tmp_path_factory):
    """The environment that makes the tiny models hub ids, offline."""
    cache = str(tmp_path_factory.mktemp("hf-cache"))
    for repo_id, name in REPOS.items():
        place_in_hf_cache(cache, repo_id, os.path.join(tiny, name))
    return {"HF_HUB_CACHE": cache, "HF_HUB_OFFLINE": "1"}


def inspect_json(*args: str, env: dict) -> dict:
    proc = run_cli("inspect", *args, "--json", env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_inspect_with_cached_ids_says_what_it_says_with_folders(tiny, hub):
    by_id = inspect_json("tiny-org/kimi-cost-draft-output-of", "--target",
                         "tiny-org/kimi-cost-target", env=hub)
    by_folder = inspect_json(os.path.join(tiny, "draft-kimi-cost-output-of"), "--target",
                             os.path.join(tiny, kimi_cost.NAME), env=hub)
    assert by_id["found_in"] == "Hugging Face cache", by_id
    assert by_id["headers_from"] == "Hugging Face cache", by_id
    assert by_id["capture_ids"] == kimi_cost.KIMI_AUX_LAYER_IDS
    for key in ("capture_ids", "convention", "convention_reason", "layer_ids", "layout",
                "mla", "flags", "problems", "num_aux_hidden_states"):
        assert by_id[key] == by_folder[key], key
    assert by_id["target"]["num_hidden_layers"] == 61


def test_inspect_takes_a_revision(hub):
    assert inspect_json("tiny-org/draft", "--revision", "main", "--target", "tiny-org/target",
                        "--target-revision", HF_COMMIT, env=hub)["capture_ids"] == [2, 3, 5]
    proc = run_cli("inspect", "tiny-org/draft", "--revision", "v9", env=hub, timeout=120)
    assert proc.returncode == 2 and "at revision v9" in proc.stderr, proc.stderr


# command -> arguments naming MISSING where the command needs a model
UNCACHED = {
    "inspect": ["inspect", MISSING],
    "inspect --target": ["inspect", "tiny-org/draft", "--target", MISSING],
    "calibrate": ["calibrate", "--target", MISSING, "--draft", "tiny-org/draft"],
    "bench-e2e": ["bench-e2e", "--target", MISSING, "--draft", "tiny-org/draft"],
    "soak": ["soak", "--target", "tiny-org/target", "--draft", MISSING],
    "eval": ["eval", "--target", MISSING, "--draft", "tiny-org/draft"],
}


@pytest.mark.parametrize("command", sorted(UNCACHED))
def test_an_uncached_id_is_one_line_and_exit_2(hub, command):
    proc = run_cli(*UNCACHED[command], env=hub, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert len(lines) == 1, proc.stderr
    assert MISSING in lines[0] and f"hf download {MISSING}" in lines[0], lines[0]
    assert "HF_HUB_OFFLINE" in lines[0]


def test_a_cached_config_alone_is_not_enough_to_serve(hub, tmp_path):
    """inspect leaves config.json alone in the cache; a tool that serves asks for weights."""
    cache = str(tmp_path / "hf-cache")
    snapshot = place_in_hf_cache(cache, "tiny-org/config-only", os.path.join(
        hub["HF_HUB_CACHE"], "models--tiny-org--draft", "snapshots", HF_COMMIT))
    for name in os.listdir(snapshot):
        if name != "config.json":
            os.remove(os.path.join(snapshot, name))
    env = {**hub, "HF_HUB_CACHE": cache}
    assert inspect_json("tiny-org/config-only", env=env)["found_in"] == "Hugging Face cache"
    proc = run_cli("calibrate", "--target", "tiny-org/config-only", "--draft",
                   "tiny-org/config-only", env=env, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not in the Hugging Face cache with its weights" in proc.stderr, proc.stderr


def test_vllm_resolves_cached_ids_with_the_plugin(hub):
    """The runtime's pre-serve checks read the draft's headers from the cache: the
    output-of draft named by id makes vLLM capture Kimi's layers."""
    result = probe_engine_config("tiny-org/kimi-cost-target",
                                 "tiny-org/kimi-cost-draft-output-of", env=hub)
    assert result["top_level_layer_ids"] == kimi_cost.KIMI_AUX_LAYER_IDS, result
    assert "headers from the Hugging Face cache" in result["_log"], result["_log"][-3000:]
