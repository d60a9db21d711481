"""Compatibility with vLLM's releases: the ground every other group stands on.

Every difference between the vLLM releases the plugin meets, as data (``vllm_compat``);
which releases it acts on and whether its draft class's contract holds on one it was not
checked on (``release_gate``); and every change it makes to vLLM in memory, journaled and
undoable (``patching``).

It imports ``vllm_kimi_eagle.settings`` only.
"""
