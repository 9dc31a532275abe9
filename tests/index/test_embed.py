"""Embedders: the real MiniLM model, and the OpenAI client against a local fake endpoint."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import numpy as np
import pytest
import xxhash

from contextfs.errors import EmbedderUnavailable
from contextfs.index.embed import (
    Embedder,
    LocalEmbedder,
    OpenAIEmbedder,
    local_model_path,
)
from tests.fake_openai import FakeOpenAI, dead_url

# ---- the local model -----------------------------------------------------------------------


def test_local_model_path_is_the_packaged_model():
    path = local_model_path()
    assert path.name == "model"
    assert (path / "config.json").is_file()
    assert (path.parent / "__init__.py").is_file()


@pytest.mark.model
def test_local_embeddings_are_384_d_unit_vectors(embedder: LocalEmbedder):
    assert isinstance(embedder, Embedder)
    assert (embedder.name, embedder.dim) == ("all-MiniLM-L6-v2", 384)
    rows = embedder.embed(["I prefer vim over emacs.", "The meeting is on Tuesday.", "ß 日本語 🙂"])
    assert rows.dtype == np.float32
    assert rows.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)


@pytest.mark.model
def test_local_embeddings_are_semantically_sensible(embedder: LocalEmbedder):
    anchor, paraphrase, unrelated = embedder.embed(
        [
            "The user prefers dark mode in their code editor.",
            "In the editor, they like a dark colour theme.",
            "The quarterly tax return is due at the end of April.",
        ]
    )
    assert anchor @ paraphrase > anchor @ unrelated + 0.2


@pytest.mark.model
def test_local_embed_is_batch_independent_and_handles_empty(embedder: LocalEmbedder):
    texts = [f"note number {i} about gardening and tomatoes" for i in range(40)]
    together = embedder.embed(texts)
    alone = embedder.embed(texts[7:8])
    np.testing.assert_allclose(together[7], alone[0], atol=1e-5)
    empty = embedder.embed([])
    assert empty.shape == (0, 384)
    assert empty.dtype == np.float32


@pytest.mark.model
def test_local_embeddings_are_sentence_transformers_own(embedder: LocalEmbedder):
    """index.bert computes what sentence-transformers computes from the same files (the
    reference is a test dependency only): long texts truncated at 256 tokens alike."""
    from sentence_transformers import SentenceTransformer

    texts = [
        "She prefers vim with relative line numbers.",
        "ok",
        "On 2026-11-18 we migrated the orders database to PostgreSQL 16; nothing was lost.",
        "Ünïcödé, emoji 🙂 and CJK 日本語 in one line",
        "word " * 400,
    ]
    reference = SentenceTransformer(str(local_model_path()), device="cpu").encode(
        texts, normalize_embeddings=True, show_progress_bar=False
    )
    np.testing.assert_allclose(embedder.embed(texts), reference, atol=1e-5)


def test_local_embedder_with_a_bad_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(EmbedderUnavailable):
        LocalEmbedder(model_path=str(tmp_path / "nowhere"))


# ---- an OpenAI-compatible endpoint -----------------------------------------------------------

FAKE_DIM = 8


def fake_vector(text: str) -> list[float]:
    """Deterministic, deliberately not unit length (the client must normalise)."""
    rng = np.random.default_rng(xxhash.xxh64_intdigest(text.encode()))
    return (rng.normal(size=FAKE_DIM) * 3.0).tolist()


@pytest.fixture
def endpoint(monkeypatch) -> Iterator[FakeOpenAI]:
    """/v1/embeddings with fake_vector()s, as floats or base64, in reverse order (servers
    may answer out of order; `index` says where each goes)."""

    def respond(body: dict) -> dict:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = []
        for i, text in enumerate(texts):
            vec = fake_vector(text)
            if body.get("encoding_format") == "base64":
                emb = base64.b64encode(np.asarray(vec, dtype="<f4").tobytes()).decode()
            else:
                emb = vec
            data.append({"object": "embedding", "index": i, "embedding": emb})
        data.reverse()
        return {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }

    fake = FakeOpenAI("/v1/embeddings", respond)
    monkeypatch.setenv("CONTEXTFS_TEST_KEY", "sk-test")
    try:
        yield fake
    finally:
        fake.close()


def _base_url(server: FakeOpenAI) -> str:
    return server.url


def test_openai_embedder_normalises_and_learns_dim(endpoint: FakeOpenAI):
    emb = OpenAIEmbedder(
        base_url=_base_url(endpoint),
        model="fake-embed",
        api_key_env="CONTEXTFS_TEST_KEY",
        batch_size=3,
    )
    texts = [f"text {i}" for i in range(7)]
    rows = emb.embed(texts)
    assert emb.dim == FAKE_DIM
    assert emb.name == "fake-embed"
    assert rows.shape == (7, FAKE_DIM)
    assert rows.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-6)
    # the rows come back in input order even though the server reversed them
    for text, row in zip(texts, rows, strict=True):
        want = np.asarray(fake_vector(text), dtype=np.float32)
        np.testing.assert_allclose(row, want / np.linalg.norm(want), atol=1e-6)
    # batches of 3: 3 + 3 + 1
    assert [len(body["input"]) for _, _, body in endpoint.requests] == [3, 3, 1]
    assert isinstance(emb, Embedder)  # after the counting: on 3.11 this reads `dim`
    path, auth, body = endpoint.requests[0]
    assert path == "/v1/embeddings"
    assert auth == "Bearer sk-test"
    assert body["model"] == "fake-embed"


def test_openai_embedder_probes_dim_when_asked_first(endpoint: FakeOpenAI):
    emb = OpenAIEmbedder(base_url=_base_url(endpoint), model="m", api_key_env="CONTEXTFS_TEST_KEY")
    assert emb.dim == FAKE_DIM
    assert len(endpoint.requests) == 1
    assert emb.embed([]).shape == (0, FAKE_DIM)


def test_openai_embedder_rejects_a_dim_mismatch(endpoint: FakeOpenAI):
    emb = OpenAIEmbedder(
        base_url=_base_url(endpoint), model="m", api_key_env="CONTEXTFS_TEST_KEY", dim=16
    )
    assert emb.dim == 16
    with pytest.raises(EmbedderUnavailable, match="8-d"):
        emb.embed(["x"])


def test_openai_embedder_server_error_is_embedder_unavailable(endpoint: FakeOpenAI):
    endpoint.fail = True
    emb = OpenAIEmbedder(
        base_url=_base_url(endpoint),
        model="m",
        api_key_env="CONTEXTFS_TEST_KEY",
        max_retries=0,
        timeout=5,
    )
    with pytest.raises(EmbedderUnavailable, match="failed"):
        emb.embed(["x"])


def test_openai_embedder_unreachable_is_embedder_unavailable(monkeypatch):
    monkeypatch.setenv("CONTEXTFS_TEST_KEY", "sk-test")
    emb = OpenAIEmbedder(
        base_url=dead_url(), model="m", api_key_env="CONTEXTFS_TEST_KEY", max_retries=0, timeout=2
    )
    with pytest.raises(EmbedderUnavailable):
        emb.embed(["x"])


def test_openai_embedder_needs_its_key_for_a_remote_endpoint(monkeypatch):
    monkeypatch.delenv("CONTEXTFS_NO_SUCH_KEY", raising=False)
    with pytest.raises(EmbedderUnavailable, match="CONTEXTFS_NO_SUCH_KEY"):
        OpenAIEmbedder(
            base_url="https://embed.example.com/v1", model="m", api_key_env="CONTEXTFS_NO_SUCH_KEY"
        )


def test_openai_embedder_on_a_local_server_needs_no_key(endpoint: FakeOpenAI, monkeypatch):
    """llama.cpp, Ollama, vLLM: the variable may be unset; a placeholder key is sent."""
    monkeypatch.delenv("CONTEXTFS_NO_SUCH_KEY", raising=False)
    emb = OpenAIEmbedder(
        base_url=_base_url(endpoint), model="m", api_key_env="CONTEXTFS_NO_SUCH_KEY"
    )
    assert emb.embed(["a local vector"]).shape == (1, FAKE_DIM)
    ((_path, auth, _body),) = endpoint.requests
    assert auth == "Bearer contextfs-no-key"
