"""Template nulls in a kimi_k2 config: which are read as defaults, which are refused."""

from vllm_kimi_eagle.serving.config_alias import refused_nulls

REFUSED = {"tie_word_embeddings", "chunk_size_feed_forward", "vocab_size", "rms_norm_eps"}


def test_refused_nulls_split_into_shape_fields_and_defaults():
    config = {"tie_word_embeddings": None, "chunk_size_feed_forward": None, "vocab_size": None,
              "rms_norm_eps": None, "q_lora_rank": None, "hidden_size": 7168}
    stated, defaulted = refused_nulls(config, REFUSED.__contains__)
    assert stated == ["vocab_size", "rms_norm_eps"]
    assert defaulted == ["tie_word_embeddings", "chunk_size_feed_forward"]


def test_a_null_the_class_takes_keeps_its_meaning():
    # q_lora_rank null means "no q LoRA": never replaced by a default of 1536
    assert refused_nulls({"q_lora_rank": None, "rope_theta": None}, REFUSED.__contains__) == ([], [])
    assert refused_nulls({"tie_word_embeddings": False}, REFUSED.__contains__) == ([], [])
