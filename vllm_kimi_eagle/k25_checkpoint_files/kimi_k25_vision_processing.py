"""Image processor of the tiny Kimi-K2.5-shaped target (vllm-kimi-eagle), loaded with
trust_remote_code like the real checkpoint's kimi_k25_vision_processing.py.

Images only (no video chunks). An image is scaled down (never up) until it has at most
``in_patch_limit`` patches of ``patch_size`` pixels and at most
``patch_limit_on_one_side`` patches per side, padded with black to a multiple of
``merge_kernel_size * patch_size`` on each side, normalized, and cut into patches; it
takes one ``<|media_pad|>`` token per merged ``merge_kernel_size``² block of patches.
"""

import math

import numpy as np
import torch
from PIL import Image
from transformers.image_processing_utils import BaseImageProcessor, BatchFeature


class KimiK25VisionProcessor(BaseImageProcessor):
    model_input_names = ["pixel_values", "grid_thws"]

    def __init__(self, media_proc_cfg=None, **kwargs):
        super().__init__(**kwargs)
        self.media_proc_cfg = dict(media_proc_cfg or {})

    def resize_config(self, width: int, height: int) -> dict:
        cfg = self.media_proc_cfg
        patch, side = cfg["patch_size"], cfg["patch_limit_on_one_side"]
        patches = max(1.0, width // patch) * max(1.0, height // patch)
        scale = min(1.0, math.sqrt(cfg["in_patch_limit"] / patches),
                    side * patch / width, side * patch / height)
        new_w = min(max(1, int(width * scale)), side * patch)
        new_h = min(max(1, int(height * scale)), side * patch)
        block = cfg["merge_kernel_size"] * patch
        padded_w, padded_h = -(-new_w // block) * block, -(-new_h // block) * block
        tokens = cfg.get("fixed_output_tokens") or (padded_w // block) * (padded_h // block)
        return {"new_width": new_w, "new_height": new_h, "padded_width": padded_w,
                "padded_height": padded_h, "num_tokens": tokens}

    def media_tokens_calculator(self, media: dict) -> int:
        image = _image(media)
        return self.resize_config(*image.size)["num_tokens"]

    def preprocess(self, medias, return_tensors=None, **kwargs) -> BatchFeature:
        medias = medias if isinstance(medias, list) else [medias]
        cfg = self.media_proc_cfg
        patch = cfg["patch_size"]
        mean = np.asarray(cfg["image_mean"], dtype=np.float32)
        std = np.asarray(cfg["image_std"], dtype=np.float32)
        pixel_values, grid_thws = [], []
        for media in medias:
            image = _image(media).convert("RGB")
            size = self.resize_config(*image.size)
            resized = image.resize((size["new_width"], size["new_height"]),
                                   resample=Image.Resampling.BICUBIC)
            canvas = np.zeros((size["padded_height"], size["padded_width"], 3), np.float32)
            canvas[: size["new_height"], : size["new_width"]] = np.asarray(resized)
            canvas = (canvas / 255.0 - mean) / std  # the padding is black, normalized too
            gh, gw = size["padded_height"] // patch, size["padded_width"] // patch
            patches = canvas.reshape(gh, patch, gw, patch, 3).transpose(0, 2, 4, 1, 3)
            pixel_values.append(patches.reshape(gh * gw, 3, patch, patch))
            grid_thws.append([1, gh, gw])
        data = {"pixel_values": torch.from_numpy(np.concatenate(pixel_values)),
                "grid_thws": torch.tensor(grid_thws, dtype=torch.long)}
        return BatchFeature(data=data, tensor_type=return_tensors)


def _image(media) -> Image.Image:
    if isinstance(media, Image.Image):
        return media
    if media.get("type", "image") != "image":
        raise ValueError(f"kimi_k25_vision_processing.py: media type {media.get('type')!r} "
                         "is not supported by the tiny target's processor (images only)")
    return media["image"]
