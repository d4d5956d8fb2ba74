"""openfia inside other frameworks: each submodule is optional and imports its framework only
when it is itself imported.

- `openfia.integrations.transformers`: openfia as an attention implementation of Hugging Face
  transformers (`pip install openfia[transformers]`).
"""
