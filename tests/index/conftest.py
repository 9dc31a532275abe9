"""Fixtures for the derived indexes: the real MiniLM model, loaded once per session."""

from __future__ import annotations

import pytest

from contextfs.index.embed import LocalEmbedder


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "model: loads the real embedding model (a few seconds)")


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    return LocalEmbedder(threads=1)
