"""The draft's record: what a draft is, read once from its files.

Its config.json parsed into one validated record (``draft_config``), what that record
means (``draft_spec``, ``quantization``, ``draft_positions``, ``rope_override``), its
checkpoint's headers (``checkpoint``, ``draft_source``, ``hf_cache``), which target layers
it reads (``layer_ids``), which class serves it (``architectures``, ``draft_class``) and
the one report of it all (``draft_report``, handed to the worker as ``served_draft``).

Pure decisions over plain values: it imports ``vllm_kimi_eagle.settings`` and
``compat`` only, never vLLM at import time, never ``serving`` or ``cpu``. ``inspect``
and the start-up hook read the same record.
"""
