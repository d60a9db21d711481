"""Processor of the tiny Kimi-K2.5-shaped target (vllm-kimi-eagle), loaded with
trust_remote_code like the real checkpoint's kimi_k25_processor.py: tokenizes the text
and repeats each ``<|media_pad|>`` as many times as its image takes tokens."""

from transformers import BatchFeature
from transformers.processing_utils import ProcessorMixin

MEDIA_PAD = "<|media_pad|>"


class KimiK25Processor(ProcessorMixin):
    attributes = ["image_processor", "tokenizer"]

    def __init__(self, image_processor=None, tokenizer=None, **kwargs):
        super().__init__(image_processor, tokenizer, **kwargs)

    def __call__(self, text=None, images=None, return_tensors=None, **kwargs):
        images = list(images or [])
        out = dict(self.image_processor.preprocess(images)) if images else {}
        if text is not None:
            texts = text if isinstance(text, list) else [text]
            pad = self.tokenizer.convert_tokens_to_ids(MEDIA_PAD)
            counts = [self.image_processor.media_tokens_calculator(i) for i in images]
            ids = []
            for row in self.tokenizer(texts)["input_ids"]:
                expanded = []
                for token in row:
                    expanded += [pad] * counts.pop(0) if token == pad else [token]
                ids.append(expanded)
            out["input_ids"] = ids
        return BatchFeature(data=out, tensor_type=return_tensors)
