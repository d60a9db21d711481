"""The route matrix (tests/route_matrix.py): every malformed or unusual draft through every
route a draft reaches a class by, vLLM's own config path deciding, one process per route.
Nothing is served otherwise than trained without a word; ``inspect`` says what start-up
does; docs/checkpoints.md prints the matrix as it is."""

from __future__ import annotations

import json
import os
import sys

import pytest
from packaging.version import Version

from tests import route_matrix
from tests.helpers import REPO, run_process
from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.tools.inspect_draft import inspect_draft


RELEASE = vllm_compat.installed_vllm_version()
# The release docs/checkpoints.md's matrix was made on.
DOCS_RELEASE = Version("0.32.0")


@pytest.fixture(scope="module")
def work(tiny, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("routes"))
    for case in route_matrix.CASES:
        route_matrix.write_case(tiny, folder, case)
    return folder


@pytest.fixture(scope="module")
def outcomes(tiny, work):
    """route -> case -> start-up's outcome; the four routes' processes side by side."""
    import concurrent.futures

    def run(route):
        proc = run_process([os.path.join(REPO, "tests", "route_matrix.py"), tiny, work, route],
                           route_matrix.ENV[route], timeout=900)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        assert proc.returncode == 0 and lines, (route, proc.stdout[-2000:], proc.stderr[-4000:])
        found = json.loads(lines[-1])
        warned = route_matrix.warnings_by_case(proc.stdout)
        for name, outcome in found.items():
            outcome["warnings"] = warned.get(name, [])
        return found

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return dict(zip(route_matrix.ROUTES, pool.map(run, route_matrix.ROUTES)))


def test_no_draft_is_served_otherwise_than_trained_without_a_word(outcomes):
    table = route_matrix.table(outcomes, RELEASE)
    print("\n" + table)
    assert "SILENT" not in table
    for route in route_matrix.ROUTES:
        for case in route_matrix.CASES:
            found = outcomes[route][case.name]
            if route in case.right_on_here(RELEASE):  # served right: never refused
                assert found["started"], (route, case.name, found.get("error", "")[:400])
            elif not found["started"]:
                error = found["error"]
                # one refusal, the plugin's, naming a file (a path or config.json)
                if not (route == "fallback" and case.name == "layer ids written as text"):
                    assert error.startswith(("DraftRefusedError", "DraftClassError",
                                             "CheckpointError")), (route, case.name, error)
                    assert "config.json" in error or ".safetensors" in error or \
                        os.sep in error, (route, case.name, error)


def test_the_pruned_draft_without_d2t_is_refused_naming_the_tensor_on_every_route(outcomes):
    for route in route_matrix.ROUTES:
        found = outcomes[route]["pruned, no d2t"]
        assert not found["started"], route
        assert "tensor 'd2t' (shape [192]) is missing" in found["error"], (route, found)
        in_tree = route != "plugin"
        assert ("vLLM's in-tree class would read draft id k as target id k" in found["error"]) \
            is in_tree, (route, found["error"])


@pytest.mark.parametrize("route", ["plugin", "upstream"])
def test_inspect_says_what_start_up_does(tiny, work, outcomes, route):
    """The same verdict per case: refused with the same first line, or served."""
    environ = {**os.environ, **route_matrix.ENV[route]}
    for case in route_matrix.CASES:
        report = inspect_draft(route_matrix.write_case(tiny, work, case),
                               os.path.join(tiny, "target"), environ=environ)
        found = outcomes[route][case.name]
        assert bool(report["problems"]) is (not found["started"]), (route, case.name, report,
                                                                   found)
        if report["problems"]:
            first = report["problems"][0].splitlines()[0][:100]
            assert first in found["error"], (route, case.name, first, found["error"][:600])
        if found["warnings"]:
            assert report["notes"], (route, case.name)


def test_the_docs_print_the_matrix_as_it_is(outcomes):
    """The page prints the matrix of the release it names; on another release only the
    rows of a gap bound to some releases differ (the first test holds each of them)."""
    docs = open(os.path.join(REPO, "docs", "checkpoints.md")).read()
    table = route_matrix.table(outcomes, RELEASE)
    if vllm_compat.minor(RELEASE) == vllm_compat.minor(DOCS_RELEASE):
        assert table in docs, ("docs/checkpoints.md's route matrix differs from this run's; "
                               "paste it:\n" + table)
        return
    bound = [f"| {case.name} |" for case in route_matrix.CASES
             if case.right_on_here(RELEASE) != case.right_on_here(DOCS_RELEASE)]
    for row in table.splitlines():
        if not row.startswith(tuple(bound)):
            assert row in docs, ("docs/checkpoints.md's route matrix differs from this "
                                 f"run's (vLLM {RELEASE}) in a row no release bounds:\n{row}")
