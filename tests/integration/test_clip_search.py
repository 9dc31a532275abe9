"""Cross-modal search through a real mount (docs/media.md): with a CLIP checkpoint
configured, the CLIP gate decides on pictures dropped into the inbox (scores in the
reports), and a question asked in words ranks the picture it describes first, though the
picture's own text (format, size, dates) names neither its colour nor its shape.

The checkpoint is the tiny CLIP model the `tiny_clip` fixture trains on generated
coloured shapes, loaded by the daemon through the same code as any checkpoint."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contextfs.testing import Mount, wait_index_ready
from contextfs.testing import tiny_clip as tc

PICTURES = {  # the names say nothing of what the pictures show
    "photo-1.png": ("red", "circle"),
    "photo-2.png": ("blue", "circle"),
    "photo-3.png": ("red", "square"),
    "photo-4.png": ("green", "triangle"),
    "photo-5.png": ("yellow", "square"),
}


def report(inbox: Path, name: str, timeout: float = 90.0) -> str:
    deadline = time.monotonic() + timeout
    path = inbox / f"{name}.report.md"
    while True:
        text = path.read_text() if path.exists() else ""
        if "state:" in text and "waiting to be" not in text:
            return text
        assert time.monotonic() < deadline, f"no decision for {name}: {text!r}"
        time.sleep(0.2)


def results(mnt: Path, question: str) -> dict:
    return json.loads((mnt / ".query" / question / "_results.json").read_text())


def wait_images(mnt: Path, count: int, timeout: float = 90.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        status = (mnt / ".status").read_text()
        if f"image_vectors: {count} images" in status:
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.2)


@pytest.mark.slow
def test_a_question_in_words_ranks_the_picture_it_describes(tiny_clip, tmp_path: Path) -> None:
    config, weights = tiny_clip
    data, mnt, src = tmp_path / "data", tmp_path / "mnt", tmp_path / "src"
    for d in (data, mnt, src):
        d.mkdir()
    (data / "config.yaml").write_text(
        f"clip_model_config: {config}\nclip_checkpoint: {weights}\n"
        "clip_drop_above: 0.99\nclip_new_below: 0.85\nclip_query_min: 0.3\n"
    )
    m = Mount(mnt, data, search=True)
    m.start()
    try:
        inbox = mnt / ".inbox"
        for i, (name, (colour, shape)) in enumerate(PICTURES.items()):
            (src / name).write_bytes(tc.shape_image(colour, shape, seed=50 + i))
        # the last picture again, as a JPEG: a near-duplicate of the stream's last image
        (src / "photo-6.jpg").write_bytes(tc.shape_image("yellow", "square", seed=54, fmt="JPEG"))
        for name in [*PICTURES, "photo-6.jpg"]:  # real cp: it exits 0 only when close() did
            subprocess.run(["cp", str(src / name), str(inbox / name)], check=True)
        reports = {name: report(inbox, name) for name in [*PICTURES, "photo-6.jpg"]}
        for text in reports.values():  # every decision by the CLIP gate, with its score
            assert re.search(r"visual gate \(CLIP \(.*\)\): .*similarity (-?\d\.\d+|none)", text)
        for name in PICTURES:
            assert "image kept" in reports[name], reports[name]
        dropped = re.search(
            r"state: dropped \(near-duplicate of .*photo-5, similarity (\S+)\)",
            reports["photo-6.jpg"],
        )
        assert dropped and float(dropped.group(1)) >= 0.99, reports["photo-6.jpg"]
        status = wait_images(mnt, len(PICTURES))
        assert "visual gate: CLIP (" in status
        wait_index_ready(mnt, 90)

        nodes = {
            name: next(p for p in (mnt / "user/default/images").iterdir() if name[:-4] in p.name)
            for name in PICTURES
        }
        for name, (colour, shape) in PICTURES.items():
            found = results(mnt, tc.caption(colour, shape))
            assert "clip" in found["searched_by"], found
            first = found["hits"][0]
            assert first["path"].endswith(nodes[name].name), (name, found["hits"][:3])
            assert "image" in first["tiers"]
        # the bundle shows the picture's text and where its bytes are
        context = (mnt / ".query" / "a red circle" / "_context.md").read_text()
        assert "searched by BM25 + vectors + CLIP images" in context
        first = re.search(r"^## (\S+)", context, re.MULTILINE).group(1)
        assert first.endswith(nodes["photo-1.png"].name), context
        path = f"user/default/images/{nodes['photo-1.png'].name}/original.png"
        assert f"bytes: {path}" in context, context
        assert (mnt / path).read_bytes() == (src / "photo-1.png").read_bytes()
        # type=image keeps to pictures; a question no picture is near finds none by CLIP
        typed = results(mnt, "@type=image/a green triangle")
        assert typed["hits"] and all(h["type"] == "image" for h in typed["hits"])
    finally:
        m.stop()
    assert m.fsck() == []
    # `contextfs reindex` rebuilds the image vectors with the others
    (data / "index").rename(data / "index.old")
    out = subprocess.run(
        [sys.executable, "-m", "contextfs", "reindex", str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert f"{len(PICTURES)} images by CLIP" in out.stderr, out.stderr
    [snap] = (data / "index").glob("snap-*")
    saved = json.loads((snap / "images.json").read_text())
    assert len(saved["digests"]) == len(PICTURES)
    shutil.rmtree(tmp_path / "src", ignore_errors=True)
