"""The models the tools are given: a model as vLLM takes it (folder, Hugging Face cache,
hub id: ``model_source``) and a target config's fields (``config_access``).

It imports the runtime's ``draft`` (the Hugging Face cache, read one way).
"""
