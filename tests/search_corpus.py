"""Moved to `contextfs.testing.search_corpus` (the harness scripts import without sys.path
edits); kept as an alias while scripts in other branches still import it from here."""

from __future__ import annotations

from contextfs.testing.search_corpus import SCOPED, TARGETS, Target, filler  # noqa: F401
