"""Draft checkpoints on disk: tensor names, shapes and files, and the checks we run on them.

Reads safetensors headers only (no weights), so a whole checkpoint is checked in
milliseconds before a single weight is loaded. Every problem names the tensor, the
expected and found shape and the file, because a draft that loads with a tensor missing,
misplaced or ignored serves with lower acceptance and no error.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field

from vllm_kimi_eagle.draft.draft_spec import (
    IGNORED_TENSORS,
    LAYER,
    LAYER_PREFIX_ALIASES,
    SHAREABLE_TENSORS,
    DraftSpec,
    canonical_name,
    expected_dtype,
    expected_tensors,
    linear_weights,
)

INDEX_FILE = "model.safetensors.index.json"


class CheckpointError(ValueError):
    """A draft checkpoint that would not serve as the draft it claims to be."""


@dataclass(frozen=True)
class TensorInfo:
    file: str
    shape: tuple[int, ...]
    dtype: str
    # Where its bytes are in the file (from its start), where the header was read from
    # the file itself; None from the hub's metadata.
    span: tuple[int, int] | None = field(default=None, compare=False)


# safetensors dtype names of integer tensors (d2t holds integer offsets).
INTEGER_DTYPES = frozenset({"I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64"})
# torch's names of the dtypes safetensors writes, for tensors met while loading.
TORCH_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64",
                "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "int8": "I8",
                "int16": "I16", "int32": "I32", "int64": "I64", "uint8": "U8", "bool": "BOOL"}


def dtype_name(dtype) -> str:
    """A safetensors dtype name, for a safetensors name or a torch dtype."""
    text = str(dtype).removeprefix("torch.")
    return TORCH_DTYPES.get(text, text.upper())


# Bits per element of every dtype safetensors writes.
DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
              "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
              "I64": 64, "U64": 64, "F64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
HEADER_LIMIT = 100_000_000  # safetensors' own limit on the JSON header's length


def read_safetensors_header(path: str) -> dict[str, TensorInfo]:
    """Names, shapes and dtypes of one .safetensors file, from its header alone; the
    header's entries are checked against the file's size, so that a truncated file is
    caught before a weight is read."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        prefix = f.read(8)
        length = struct.unpack("<Q", prefix)[0] if len(prefix) == 8 else None
        fits = length is not None and length <= min(size - 8, HEADER_LIMIT)
        raw = f.read(length) if fits else None
    try:
        header = json.loads(raw) if raw is not None else None
    except (ValueError, UnicodeDecodeError):
        header = None
    if not isinstance(header, dict):
        raise CheckpointError(
            f"{path}: not a readable safetensors file ({size} bytes; its header "
            f"{'length' if raw is None else 'JSON'} is corrupt). The file is truncated or "
            "was not written by safetensors: download or export it again."
        )
    return header_tensors(header, path, data_size=size - 8 - length, data_start=8 + length)


def header_tensors(header: dict, path: str, data_size: int | None = None,
                   data_start: int | None = None) -> dict[str, TensorInfo]:
    """TensorInfo per tensor of a parsed safetensors header (``path`` names its file).
    Each entry must have a known dtype, a shape of non-negative integers and, where
    ``data_size`` (the bytes after the header) is known, data offsets that are integers,
    ordered, as long as the shape and dtype say and within the file; ``data_start``: where
    the data begins in the file (each tensor's span is kept)."""
    tensors = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        problem = _entry_problem(meta, data_size)
        if problem:
            raise CheckpointError(
                f"{path}: tensor {name!r}: {problem}. The file is truncated or was not "
                "written by safetensors: download or export it again.")
        span = None
        if data_size is not None and data_start is not None:
            begin, end = meta["data_offsets"]
            span = (data_start + begin, data_start + end)
        tensors[name] = TensorInfo(path, tuple(meta["shape"]), meta["dtype"], span)
    return tensors


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _entry_problem(meta, data_size: int | None) -> str | None:
    """What is wrong with one header entry, or None."""
    if not isinstance(meta, dict):
        return f"its header entry is {type(meta).__name__}, not an object"
    dtype, shape = meta.get("dtype"), meta.get("shape")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        return f"dtype {dtype!r} is not a safetensors dtype ({', '.join(DTYPE_BITS)})"
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        return f"shape {shape!r} is not a list of non-negative integers"
    if data_size is None:
        return None
    offsets = meta.get("data_offsets")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_int, offsets))):
        return f"data_offsets {offsets!r} are not two integers"
    begin, end = offsets
    if not 0 <= begin <= end:
        return f"data_offsets {offsets} are not ordered"
    if end > data_size:
        return (f"data_offsets {offsets} end past the file's data ({data_size} bytes after "
                "the header)")
    numel = 1
    for d in shape:
        numel *= d
    expected = -(-numel * DTYPE_BITS[dtype] // 8)
    if end - begin != expected:
        return (f"data_offsets {offsets} hold {end - begin} bytes, but shape {shape} of "
                f"{dtype} takes {expected}")
    return None


def index_shards(index_path: str) -> list[str]:
    """The shard file names an index (``model.safetensors.index.json``) lists, sorted; an
    index that cannot be read is a CheckpointError naming it."""
    try:
        with open(index_path, encoding="utf-8") as f:
            index = json.load(f)
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{index_path}: not valid JSON ({err}); the file is truncated "
                              "or corrupt: download or export it again.") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map \
            or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(
            f"{index_path}: field 'weight_map' is {_short(weight_map)}; expected an object "
            "of tensor name -> shard file name. Download or export the index again, or "
            "remove it from a folder holding one model.safetensors.")
    outside = sorted({v for v in weight_map.values()
                      if os.path.isabs(v) or os.pardir in v.replace("\\", "/").split("/")})
    if outside:
        raise CheckpointError(
            f"{index_path}: field 'weight_map' names shard(s) {outside[:3]} outside the "
            "draft's folder; an index names its shards by their file names beside it. "
            "Download or export the index again.")
    return sorted(set(weight_map.values()))


def _short(value) -> str:
    text = json.dumps(value) if value is not None else "missing"
    return text if len(text) <= 80 else text[:77] + "..."


def checkpoint_files(folder: str) -> list[str]:
    """The .safetensors files of a checkpoint folder: the index's shards, or all of them."""
    index = os.path.join(folder, INDEX_FILE)
    if os.path.exists(index):
        return [os.path.join(folder, shard) for shard in index_shards(index)]
    return sorted(
        os.path.join(folder, name)
        for name in os.listdir(folder)
        if name.endswith(".safetensors")
    )


def read_checkpoint(folder: str) -> dict[str, TensorInfo]:
    """Every tensor of a checkpoint folder, raw name -> TensorInfo."""
    files = checkpoint_files(folder)
    if not files:
        raise CheckpointError(
            f"{folder}: no .safetensors file found; a draft checkpoint is one "
            f"model.safetensors or shards listed in {INDEX_FILE}."
        )
    tensors: dict[str, TensorInfo] = {}
    for path in files:
        if not os.path.exists(path):
            raise CheckpointError(
                f"{os.path.join(folder, INDEX_FILE)}: lists shard {os.path.basename(path)}, "
                "which is not in the folder; download the missing shard."
            )
        tensors.update(read_safetensors_header(path))
    return tensors


def layer_prefixes(names) -> list[str]:
    """The decoder-layer prefixes (``midlayer.``, ``layers.0.``) tensor names use, sorted."""
    return sorted({alias for alias in (*LAYER_PREFIX_ALIASES, LAYER) for name in names
                   if name.startswith(alias) or name.startswith("model." + alias)})


def layer_prefix(tensors: dict[str, TensorInfo]) -> str | None:
    """The decoder-layer prefix of a checkpoint (``midlayer.`` or ``layers.0.``), if one."""
    found = layer_prefixes(tensors)
    return found[0] if len(found) == 1 else None


def fc_in_features(tensors: dict[str, TensorInfo]) -> int | None:
    """Input width of the draft's fc (captured states x target hidden), if present."""
    for name, info in tensors.items():
        if canonical_name(name) == "fc.weight" and len(info.shape) == 2:
            return info.shape[1]
    return None


# What vLLM's in-tree MLA draft class does with each kind of checkpoint problem (read in
# deepseek_eagle3.py and models/utils.py AutoWeightsLoader, 0.26-0.33): the words that end a
# problem's line where that class serves the draft. The plugin's class refuses every one.
IN_TREE_DOES = {
    "unknown": "stop loading with an error that names no file",
    "bias": "drop it without a word, serving the draft without the bias it was trained with",
    "shape": "stop loading with an assertion that names no file",
    "d2t_dtype": "cast it to integers, moving every offset float rounding changed",
    "dtype": "load it without a scale and compute garbage",
    "duplicate": "load both into one parameter, the later one winning",
    "missing_weight": "leave it uninitialised, without a word",
    "missing_norm": "leave its weight at 1, without a word",
    "missing_scale": "leave the scale at its initial value, without a word",
    "missing_d2t": "read draft id k as target id k, without a word (acceptance near 1.0)",
    "lm_head": "use the target's LM head's first rows as the draft's, without a word",
    "embed_tokens": "keep the draft's uninitialised embedding (V1 runner) or stop at the "
                    "first step (Model Runner V2)",
    "vocab": "propose the ids of another tokenizer",
    "d2t_values": "write several draft logits into one target id, or index past the "
                  "target's vocabulary at the first step",
    "d2t_identity": "build no d2t and stop loading (0.30 on), or map draft ids through it "
                    "(0.26-0.29)",
}
# Tensors vLLM's loader drops by their suffix (AutoWeightsLoader
# REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER): rotary buffers an old export saved, which both
# classes rebuild from the config.
ROTARY_BUFFERS = ("rotary_emb.inv_freq", "rotary_pos_emb.inv_freq", "rotary_emb.cos_cached",
                  "rotary_emb.sin_cached")


def ignored(canonical: str) -> bool:
    """A tensor no draft class loads and none needs: t2d, and rotary buffers."""
    return canonical in IGNORED_TENSORS or canonical.endswith(ROTARY_BUFFERS)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a checkpoint: where (a file, or the folder for a missing
    tensor), what and how to fix it, and its kind (a key of IN_TREE_DOES)."""

    where: str
    text: str
    kind: str

    def line(self, in_tree: bool = False) -> str:
        line = f"{self.where}: {self.text}"
        if in_tree:
            line += f" vLLM's in-tree class would {IN_TREE_DOES[self.kind]}."
        return line


def tensor_problem(
    spec: DraftSpec, name: str, shape: tuple[int, ...], dtype: str | None = None
) -> str | None:
    """What is wrong with one checkpoint tensor, or None; the caller adds the file."""
    found = _tensor_problem(spec, name, shape, dtype)
    return found[1] if found else None


def _tensor_problem(spec: DraftSpec, name: str, shape: tuple[int, ...],
                    dtype: str | None) -> tuple[str, str] | None:
    """(kind, what is wrong) for one checkpoint tensor, or None."""
    canonical = canonical_name(name)
    if ignored(canonical) or _in_quantized_linear(spec, canonical):
        return None
    if canonical == "d2t" and dtype is not None and dtype_name(dtype) not in INTEGER_DTYPES:
        return "d2t_dtype", (
            f"tensor {name!r} has dtype {dtype}; d2t holds integer offsets (target id = "
            "draft id + d2t) and a float d2t maps draft tokens to the wrong target ids. "
            "Export d2t as int64."
        )
    expected = expected_tensors(spec)
    if canonical not in expected:
        kind = "bias" if canonical.endswith(".bias") else "unknown"
        return kind, (
            f"tensor {name!r} is not part of an MLA EAGLE3 draft with this "
            f"config (known: {', '.join(sorted(expected))}); a tensor the model does not "
            "know would be dropped and the draft served without it. Remove it, or fix "
            "config.json if it describes another layout (fc_norm, q_lora_rank, vocab)."
        )
    if tuple(shape) != expected[canonical]:
        return "shape", (
            f"tensor {name!r} has shape {list(shape)}, expected "
            f"{list(expected[canonical])} from config.json; the checkpoint and its "
            "config disagree (hidden_size, target_hidden_size, number of aux layer ids, "
            "MLA dims, draft_vocab_size or quantization block size)."
        )
    wanted = expected_dtype(spec, canonical)
    if wanted is not None and dtype is not None and dtype_name(dtype) != wanted:
        return "dtype", (
            f"tensor {name!r} has dtype {dtype_name(dtype)}, but config.json's "
            f"quantization_config makes every Linear layer of the draft {wanted} (vLLM "
            "quantizes all of them: an ignore list names vLLM's modules, never the draft's), "
            "so it would be cast without a scale and compute garbage. Quantize it like the "
            "others, or serve the unquantized draft."
        )
    return None


def _vllms_scheme(spec: DraftSpec) -> bool:
    """A quantization only vLLM's class loads: the format of its Linear layers' tensors is
    vLLM's to check (weight_packed, scales, zero points...)."""
    return spec.quantization is not None and not spec.quantization.loads_in_plugin_class


def _in_quantized_linear(spec: DraftSpec, canonical: str) -> bool:
    """A tensor of one of the draft's Linear layers, quantized in vLLM's scheme."""
    return _vllms_scheme(spec) and any(
        canonical.startswith(weight.removesuffix("weight")) for weight in linear_weights(spec))


def _quantized_linear_present(spec: DraftSpec, name: str, present: set[str]) -> bool:
    """A Linear layer in vLLM's scheme with a tensor of its own in the checkpoint."""
    if not _vllms_scheme(spec) or name not in linear_weights(spec):
        return False
    stem = name.removesuffix("weight")
    return any(found.startswith(stem) for found in present)


def missing_tensors(
    spec: DraftSpec,
    present: set[str],
    *,
    target_vocab: int | None = None,
    target_hidden: int | None = None,
) -> list[str]:
    """Problems for tensors the draft needs and the checkpoint lacks (canonical names)."""
    return [text for _, text in _missing(spec, present, target_vocab, target_hidden)]


def _missing_kind(name: str) -> str:
    if name == "d2t":
        return "missing_d2t"
    if name.endswith("norm.weight"):
        return "missing_norm"
    return "missing_weight" if name.endswith(".weight") else "missing_scale"


def _missing(spec: DraftSpec, present: set[str], target_vocab: int | None,
             target_hidden: int | None) -> list[tuple[str, str]]:
    """(kind, what is missing) for each tensor the draft needs and the checkpoint lacks."""
    problems = []
    for name in expected_tensors(spec):
        if name in present or _quantized_linear_present(spec, name, present):
            continue
        if name == "lm_head.weight":
            if target_vocab is not None and spec.draft_vocab_size != target_vocab:
                problems.append(("lm_head", (
                    f"tensor 'lm_head.weight' is missing and cannot be shared with the "
                    f"target: the draft vocabulary has {spec.draft_vocab_size} entries, "
                    f"the target's {target_vocab}. Add the draft's lm_head to the checkpoint."
                )))
            continue
        if name == "embed_tokens.weight":
            if target_hidden is not None and target_hidden != spec.hidden_size:
                problems.append(("embed_tokens", (
                    f"tensor 'embed_tokens.weight' is missing and cannot be shared with "
                    f"the target: draft hidden_size {spec.hidden_size} != target "
                    f"hidden size {target_hidden}. Add the draft's embedding."
                )))
            continue
        if name in SHAREABLE_TENSORS or (name == "d2t" and not spec.pruned_vocab):
            continue
        problems.append((_missing_kind(name), (
            f"tensor {name!r} (shape {list(expected_tensors(spec)[name])}) is missing "
            "from the checkpoint; the draft cannot run without it. Re-export the draft "
            "with all its weights."
        )))
    return problems


def d2t_problems(offsets, spec: DraftSpec, target_vocab: int | None,
                 name: str = "d2t") -> list[str]:
    """What is wrong with a d2t's values (target id = draft id + offset), for the draft
    ``spec``; ``offsets``: its integers, in draft-id order."""
    offsets = list(offsets)
    if not spec.pruned_vocab:
        moved = next((i for i, offset in enumerate(offsets) if offset), None)
        if moved is not None:
            return [
                f"tensor {name!r} maps draft id {moved} to target id {moved + offsets[moved]}, "
                f"but config.json says draft_vocab_size == vocab_size ({spec.vocab_size}), "
                "where d2t can only be the identity (all zeros). Set draft_vocab_size to the "
                "draft's vocabulary, or drop d2t."]
        return []
    targets = [i + offset for i, offset in enumerate(offsets)]
    if target_vocab is not None:
        outside = next((i for i, t in enumerate(targets) if not 0 <= t < target_vocab), None)
        if outside is not None:
            return [
                f"tensor {name!r} maps draft id {outside} to target id {targets[outside]}, "
                f"outside the target vocabulary of {target_vocab}; d2t holds offsets "
                "(target id = draft id + d2t)."]
    if len(set(targets)) != len(targets):
        seen: dict[int, int] = {}
        first = next((i, seen[t]) for i, t in enumerate(targets) if seen.setdefault(t, i) != i)
        return [
            f"tensor {name!r} maps draft ids {first[1]} and {first[0]} (and perhaps more) to "
            f"the same target id {targets[first[0]]}; each draft token must stand for a "
            "different target token. Export d2t again from the draft's vocabulary."]
    return []


# The struct format of each integer dtype safetensors writes (little-endian).
INTEGER_FORMATS = {"I8": "b", "U8": "B", "I16": "h", "U16": "H", "I32": "i", "U32": "I",
                   "I64": "q", "U64": "Q"}


def read_integers(info: TensorInfo) -> list[int] | None:
    """The values of a small integer tensor (d2t) from its file, or None where its bytes
    cannot be read here (headers from the hub, a float dtype)."""
    fmt = INTEGER_FORMATS.get(info.dtype)
    if fmt is None or info.span is None or not os.path.exists(info.file):
        return None
    begin, end = info.span
    with open(info.file, "rb") as f:
        f.seek(begin)
        data = f.read(end - begin)
    count = len(data) // struct.calcsize(fmt)
    return list(struct.unpack(f"<{count}{fmt}", data[:count * struct.calcsize(fmt)]))


def d2t_of(tensors: dict[str, TensorInfo]) -> tuple[str, TensorInfo] | None:
    """The checkpoint's d2t (its raw name and header entry), or None."""
    return next(((name, info) for name, info in tensors.items()
                 if canonical_name(name) == "d2t"), None)


def check_checkpoint(
    spec: DraftSpec,
    tensors: dict[str, TensorInfo],
    *,
    target_vocab: int | None = None,
    target_hidden: int | None = None,
    in_tree: bool = False,
    read_d2t: bool = True,
) -> list[str]:
    """Every problem of a checkpoint against its spec, one line each naming the file and
    the tensor; empty when it would serve. ``in_tree``: vLLM's in-tree class loads it, and
    each line says what that class would do; ``read_d2t``: check a d2t's values where its
    file can be read."""
    return [p.line(in_tree) for p in checkpoint_problems(
        spec, tensors, target_vocab=target_vocab, target_hidden=target_hidden,
        read_d2t=read_d2t)]


def checkpoint_problems(
    spec: DraftSpec,
    tensors: dict[str, TensorInfo],
    *,
    target_vocab: int | None = None,
    target_hidden: int | None = None,
    read_d2t: bool = True,
) -> list[Problem]:
    """Every problem of a checkpoint against its spec (``check_checkpoint``)."""
    problems = []
    if target_vocab is not None and spec.vocab_size != target_vocab:
        problems.append(Problem("config.json", (
            f"field vocab_size is {spec.vocab_size}, the target's vocabulary "
            f"has {target_vocab} entries; a draft trained for another tokenizer proposes "
            "wrong tokens. Use the draft made for this target, or set vocab_size to the "
            "target's if only the field is wrong."), "vocab"))
    seen: dict[str, str] = {}
    for name, info in sorted(tensors.items()):
        found = _tensor_problem(spec, name, info.shape, info.dtype)
        if found:
            problems.append(Problem(info.file, found[1], found[0]))
        canonical = canonical_name(name)
        if canonical in seen and not ignored(canonical):
            problems.append(Problem(info.file, (
                f"tensor {name!r} duplicates {seen[canonical]!r} (both map "
                f"to {canonical!r}); keep one layer prefix, `midlayer.` or `layers.0.`."),
                "duplicate"))
        seen[canonical] = name
    folder = os.path.dirname(next(iter(tensors.values())).file) if tensors else "?"
    problems += [Problem(folder, text, kind) for kind, text in
                 _missing(spec, set(seen), target_vocab, target_hidden)]
    d2t = d2t_of(tensors) if read_d2t else None
    if d2t and not any(p.kind in ("d2t_dtype", "shape") and f"'{d2t[0]}'" in p.text
                       for p in problems):
        offsets = read_integers(d2t[1])
        if offsets is not None:
            problems += [Problem(d2t[1].file, text, "d2t_values" if spec.pruned_vocab
                                 else "d2t_identity")
                         for text in d2t_problems(offsets, spec, target_vocab, d2t[0])]
    return problems
