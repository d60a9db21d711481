"""Config of the tiny Kimi-K2.5-shaped target (vllm-kimi-eagle), loaded with
trust_remote_code like the real checkpoint's configuration_kimi_k25.py.

The language model is a DeepSeek-V3 (``kimi_k2``) config in ``text_config``; the vision
tower is MoonViT in ``vision_config``, whose size fields are read from the plain names
(``hidden_size`` ...) or the real checkpoint's ``vt_``-prefixed names.
"""

from transformers import DeepseekV3Config, PretrainedConfig

VISION_SIZE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads",
                      "intermediate_size")


class KimiK25VisionConfig(PretrainedConfig):
    model_type = "kimi_k25_vision"

    def __init__(self, patch_size=14, hidden_size=64, num_hidden_layers=2,
                 num_attention_heads=4, intermediate_size=128, merge_kernel_size=(2, 2),
                 pos_emb_height=16, pos_emb_width=16, pos_emb_time=4,
                 hidden_act="gelu_pytorch_tanh", mm_hidden_size=None,
                 text_hidden_size=None, **kwargs):
        sizes = {"hidden_size": hidden_size, "num_hidden_layers": num_hidden_layers,
                 "num_attention_heads": num_attention_heads,
                 "intermediate_size": intermediate_size}
        for field in VISION_SIZE_FIELDS:
            prefixed = kwargs.pop(f"vt_{field}", None)
            if prefixed is not None and prefixed != sizes[field]:
                raise ValueError(
                    f"config.json vision_config: vt_{field}={prefixed} and {field}="
                    f"{sizes[field]} disagree; write one value for both")
        self.patch_size = patch_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.merge_kernel_size = list(merge_kernel_size)
        self.pos_emb_height = pos_emb_height
        self.pos_emb_width = pos_emb_width
        self.pos_emb_time = pos_emb_time
        self.hidden_act = hidden_act
        self.mm_hidden_size = mm_hidden_size or hidden_size
        self.text_hidden_size = text_hidden_size
        super().__init__(**kwargs)


class KimiK25Config(PretrainedConfig):
    model_type = "kimi_k25"
    sub_configs = {"text_config": DeepseekV3Config, "vision_config": KimiK25VisionConfig}

    def __init__(self, text_config=None, vision_config=None,
                 media_placeholder_token_id=None, use_unified_vision_chunk=True,
                 video_placeholder="<|kimi_k25_video_placeholder|>", **kwargs):
        if isinstance(text_config, dict):
            text_config = {k: v for k, v in text_config.items() if k != "model_type"}
            text_config = DeepseekV3Config(**text_config)
        self.text_config = text_config if text_config is not None else DeepseekV3Config()
        if isinstance(vision_config, dict):
            vision_config = KimiK25VisionConfig(
                **{k: v for k, v in vision_config.items() if k != "model_type"})
        self.vision_config = vision_config if vision_config is not None else KimiK25VisionConfig()
        self.media_placeholder_token_id = media_placeholder_token_id
        self.use_unified_vision_chunk = use_unified_vision_chunk
        self.video_placeholder = video_placeholder
        super().__init__(**kwargs)
