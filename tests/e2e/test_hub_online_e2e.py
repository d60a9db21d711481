"""vLLM serves a draft named by hub id, its config and weights downloaded through the real
huggingface_hub client from a local endpoint (tests/hub_endpoint.py): the plugin reads the
same draft as from its folder, and it serves the same tokens at the same acceptance. One
engine of its own: its draft is a hub id, which no other test serves."""

from __future__ import annotations

import os

import pytest

from tests import engines
from tests.helpers import engine, served
from tests.hub_endpoint import HubEndpoint
from tests.integration.test_hub_online import online

pytestmark = pytest.mark.engine
FOLDER, HUB_ID = engines.named("draft"), engines.named("hub-id")


def test_a_hub_draft_is_downloaded_and_served_as_its_folder(tiny, tmp_path):
    folder = served(engine(tiny, FOLDER))
    with HubEndpoint({"tiny-org/draft": os.path.join(tiny, "draft")}) as hub:
        by_id = served(engine(tiny, HUB_ID, draft="tiny-org/draft",
                              env=online(hub, tmp_path / "home")))
        downloads = [path for method, path in hub.requests if method == "GET"
                     and path.endswith("/model.safetensors")]
    print(f"\nhub draft: acceptance {by_id['acceptance_length']} (folder "
          f"{folder['acceptance_length']}); GETs of model.safetensors: {len(downloads)}")
    assert by_id["drafts"] > 0, "no draft proposed"
    assert "headers from the hub metadata" in by_id["_log"]
    assert "vLLM will capture the inputs of layers [2, 3, 5]" in by_id["_log"]
    assert downloads, "vLLM did not download the weights from the endpoint"
    assert by_id["token_ids"] == folder["token_ids"]
    assert by_id["acceptance_length"] == folder["acceptance_length"]
