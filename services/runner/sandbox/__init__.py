"""A sandbox per run for the `bash` and `python` tools (see provider.py)."""
