"""The generated reference pages of the manual (docs/reference/): config keys from the schema, commands and
options from the Typer app, and each stage's logged metrics from its StageSpec. `python -m rlft.docs` writes
them; `python -m rlft.docs --check` exits 1 when a page on disk is stale (tests/test_docs.py does the same).

Top layer, beside `rlft.cli` (it reads the app): no torch, no YAML."""

from rlft.docs.generate import PAGES, generate, stale  # noqa: F401
