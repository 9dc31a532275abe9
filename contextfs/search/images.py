"""Image vectors: the CLIP side of search (derived, rebuildable, like the other indexes).

Every live `image` node's original bytes are embedded by a CLIP image tower into an hnswlib
index of their own (label = node id; CLIP's space is not MiniLM's). A question is embedded
by the same model's text tower and the nearest images join the rank fusion of
`search.retrieval` as a third ranker, so `.query/a red circle/` can rank a photo whose
derived text says nothing of red or circles.

The indexer owns an `ImageVectors` and calls it at the points where it touches its own
vectors: `collect` in the trio thread (reading the bytes of images whose content changed),
`apply` in its worker thread, `save`/`load` beside its checkpoint, `clear` on a rebuild.
Only the bytes' digest decides whether an image is embedded again.

Boundary: no media decoding of its own and no torch import: the CLIP model comes in as an
`ImageEmbedder` (the composition root hands `media.clip.LazyClip`'s model over).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from contextfs.errors import IndexCorrupt
from contextfs.index.vectors import VectorIndex
from contextfs.memory.service import Memory
from contextfs.model import Node

log = logging.getLogger(__name__)

IMAGE_TYPE = "image"
_ORIGINAL = re.compile(r"^original\.(png|jpe?g|webp|gif)$", re.IGNORECASE)
_HASH = re.compile(r"^hash:\s*([0-9a-f]+)\s*$", re.MULTILINE)


class ImageEmbedder(Protocol):
    """What search needs of a CLIP model (media.clip.Clip)."""

    name: str
    dim: int

    def embed_images(self, images: Sequence[bytes]) -> np.ndarray: ...

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray: ...


class ModelSource(Protocol):
    """A lazily loaded model (media.clip.LazyClip): `get()` loads it on first use."""

    error: str | None

    def get(self) -> ImageEmbedder | None: ...


def original_of(memory: Memory, n: Node):
    """The node's `original.<image ext>` attachment, or None."""
    for a in memory.attachment_store.node_attachments(n):
        if a.kind == "file" and a.parent_id is None and _ORIGINAL.match(a.name):
            return a
    return None


def digest_of(n: Node) -> str:
    """What says the picture changed: the content hash in its front matter (xxh3-128 of
    the bytes), else its version."""
    m = _HASH.search(n.l2)
    return m.group(1) if m else f"v{n.version}"


class ImageVectors:
    """The hnswlib index of image embeddings and what it was built from."""

    def __init__(self, source: ModelSource, *, min_similarity: float = 0.2) -> None:
        self.source = source
        self.min_similarity = min_similarity  # a question's images below this are not hits
        self.model: ImageEmbedder | None = None
        self.index: VectorIndex | None = None
        self.digests: dict[int, str] = {}  # node id -> digest of the embedded bytes
        self.lock = threading.Lock()
        self.failed = 0  # images that could not be embedded (bad bytes), this run

    @property
    def ready(self) -> bool:
        return self.model is not None and self.index is not None

    @property
    def error(self) -> str | None:
        return self.source.error

    def load_model(self) -> bool:
        """Worker thread: the model (seconds, once); an empty index for it."""
        model = self.source.get()
        if model is None:
            return False
        with self.lock:
            self.model = model
            if self.index is None or self.index.dim != model.dim:
                self.index, self.digests = VectorIndex(model.dim), {}
        return True

    # ---- the indexer's hooks ------------------------------------------------------------

    def collect(self, memory: Memory, node_ids: Sequence[int]) -> tuple[list, list[int]]:
        """Trio thread: (node id, digest, bytes) of the live images whose bytes are not
        embedded yet, and the node ids whose image vector must go."""
        if not self.ready:
            return [], []
        todo, gone = [], []
        for nid in node_ids:
            n = memory.nodes.get(nid)
            if n is None or not memory.is_live(n) or n.type != IMAGE_TYPE:
                if nid in self.digests:
                    gone.append(nid)
                continue
            digest = digest_of(n)
            if self.digests.get(nid) == digest:
                continue
            att = original_of(memory, n)
            if att is None:
                if nid in self.digests:
                    gone.append(nid)
                continue
            todo.append((nid, digest, bytes(memory.attachment_store.attachment_data(att))))
        return todo, gone

    def apply(self, todo: list, gone: list[int]) -> None:
        """Worker thread: embed what changed, then update the index."""
        if not self.ready or not (todo or gone):
            return
        assert self.model is not None and self.index is not None  # ready
        vecs, labels, digests = [], [], []
        for nid, digest, data in todo:
            try:
                vecs.append(self.model.embed_images([data])[0])
            except Exception as exc:  # noqa: BLE001 - one bad picture must not stop the rest
                self.failed += 1
                log.warning("image of node %d not embedded: %s", nid, exc)
                continue
            labels.append(nid)
            digests.append(digest)
        with self.lock:
            if gone:
                self.index.delete(gone)
                for nid in gone:
                    self.digests.pop(nid, None)
            if labels:
                self.index.upsert(labels, np.stack(vecs))
                self.digests.update(zip(labels, digests, strict=True))

    def clear(self) -> None:
        with self.lock:
            if self.model is not None:
                self.index, self.digests = VectorIndex(self.model.dim), {}

    def all_images(self, memory: Memory) -> list[int]:
        return memory.live.ids(type_name=IMAGE_TYPE)

    # ---- on disk (inside the indexer's snapshot folder) ---------------------------------

    def save(self, folder: Path) -> None:
        with self.lock:
            if not self.ready:
                return
            assert self.model is not None and self.index is not None  # ready
            self.index.save(folder / "images.bin")
            (folder / "images.json").write_text(
                json.dumps(
                    {
                        "model": self.model.name,
                        "dim": self.model.dim,
                        "digests": {str(k): v for k, v in self.digests.items()},
                    }
                )
            )

    def load(self, folder: Path | None) -> bool:
        """The saved image vectors if they are whole and this model made them; False (an
        empty index, to be filled from the store) otherwise."""
        if not self.ready:
            return False
        assert self.model is not None  # ready
        try:
            if folder is None:
                raise FileNotFoundError("no snapshot")
            meta = json.loads((folder / "images.json").read_text())
            if meta.get("model") != self.model.name or meta.get("dim") != self.model.dim:
                raise IndexCorrupt(f"image vectors made by {meta.get('model')}: rebuilding")
            index = VectorIndex.load(folder / "images.bin", self.model.dim)
            digests = {int(k): v for k, v in meta["digests"].items()}
        except FileNotFoundError:
            return False
        except (IndexCorrupt, ValueError, KeyError, OSError) as exc:
            log.warning("image vectors not usable (%s); rebuilding them", exc)
            return False
        with self.lock:
            self.index, self.digests = index, digests
        return True

    # ---- questions ----------------------------------------------------------------------

    def search(
        self, question: str, k: int, allow: Callable[[int], bool] | None = None
    ) -> list[tuple[int, float]]:
        """Worker thread: the images nearest to the question by the text tower, as (node
        id, cosine), best first; those under `min_similarity` are left out (every
        question has a nearest picture: only a near one is a hit)."""
        if not self.ready or not question.strip():
            return []
        assert self.model is not None and self.index is not None  # ready
        qvec = self.model.embed_texts([question])[0]
        with self.lock:
            hits = self.index.search(qvec, k, allow=allow)
        return [(nid, sim) for nid, sim in hits if sim >= self.min_similarity]

    def status_line(self) -> str:
        if self.ready:
            assert self.model is not None  # ready
            line = f"image_vectors: {len(self.digests)} images ({self.model.name}, CLIP text tower)"
            return line + (f"; {self.failed} not embedded" if self.failed else "")
        if self.error:
            return f"image_vectors: off ({self.error})"
        return "image_vectors: waiting for the CLIP model"
