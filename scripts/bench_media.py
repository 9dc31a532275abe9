"""Benchmark the media gates on redundant streams of real media.

1. **Visual gates**: a generated slideshow of S distinct slides (Pillow), each shown R
   times in a row — the first as drawn, the repeats re-encoded as JPEG with sensor noise
   (`media_corpus.near_duplicate`) — goes through probe + signature + the decision against
   the stream's last accepted image, exactly as `MediaIntake` runs it; and the same with
   pictures of coloured shapes instead of slides. Each stream goes through the perceptual
   hash and through CLIP gates loaded by `media.clip.Clip` from saved checkpoints: the tiny
   test architecture and ViT-B-32 with random weights (speed does not depend on what the
   weights mean; their drop shares show what random weights do), and, without `--quick`,
   the tiny model trained on coloured shapes (`testing.tiny_clip`, about 35 s). Reports
   images/s and the share dropped (the ideal is (R-1)/R), plus distinct pictures wrongly
   dropped and repeats wrongly kept.
2. **Audio gate** (webrtcvad + energy + modulation): a recording that is 60% silence
   (espeak-ng sentences between sox silences) and the same with the silences replaced by
   steady white noise. Reports seconds of audio per second of gate time and the share of
   audio kept (the ideal is the 40% of speech).
3. **Video** (PyAV decoding, frames through the visual gate every second, the sound track
   through the audio gate): a generated screen recording (MP4, H.264 + AAC, 320x240 at
   10 fps) of S distinct slides each shown for 8 s, over a track that is 40% speech.
   Reports seconds of video per second of analysis, the share of sampled frames dropped
   (the ideal: all but one per slide) and the share of the track kept as speech.
4. **Bytes stored once** (unless `--no-mount`): the same photo dropped N times into a
   mount's inbox, against N different photos; the bytes the store keeps (blobs) and the
   database file's size after the daemon stops.
5. **Through a mount** (unless `--no-mount`): `cp` of a few slides and a voice memo into
   `.inbox/` of a fresh daemon (`search: false`, or `true` with `--search`), the time
   from close() returning to the report's decision (the node exists and its bytes are
   readable by then) and, with `--search`, until `.query/<file name>/` ranks the node.

Prints a markdown table and writes every figure to JSON.

    .venv/bin/python scripts/bench_media.py          # 40 slides x 4, 120 s audio, 15-slide video
    .venv/bin/python scripts/bench_media.py --quick  # 10 slides x 4, 30 s audio, 5-slide video
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from contextfs.conversations.media import MediaSettings
from contextfs.media.audio import VadSettings, decode_audio, gate_audio
from contextfs.media.visual import HashGate, decide, probe_image
from contextfs.testing import DrainedMount, write_json
from contextfs.testing import media_corpus as mc
from contextfs.testing import tiny_clip as tc

SENTENCES = [
    "The quarterly review moved to Thursday at three.",
    "Bring the budget numbers and the hiring plan.",
    "Sam will present the roadmap for the mobile app.",
    "We still need a venue for the team offsite in March.",
    "Remember to renew the domain before it expires.",
    "The new espresso machine arrives on Monday morning.",
]
TOPICS = ["Quarterly review", "Hiring plan", "Roadmap", "Budget", "Offsite", "Risks", "Launch"]


def slideshow(slides: int, repeats: int, kind: str) -> list[tuple[bytes, bool]]:
    """(bytes, is a repeat): each distinct picture then its re-encoded noisy copies."""
    stream: list[tuple[bytes, bool]] = []
    classes = [(c, sh) for c in tc.COLOURS for sh in tc.SHAPES]
    for i in range(slides):
        if kind == "slides":
            first = mc.slide(f"{TOPICS[i % len(TOPICS)]} {i + 1}")
        else:  # consecutive pictures always differ in colour or shape
            colour, shape = classes[(i * 5) % len(classes)]
            first = tc.shape_image(colour, shape, size=224, seed=i)
        stream.append((first, False))
        stream += [(mc.near_duplicate(first, seed=i * 10 + r), True) for r in range(1, repeats)]
    return stream


def clip_gates(quick: bool) -> list[tuple[object, float, float]]:
    """(gate, drop_above, new_below): CLIP gates from saved checkpoints, loaded by the
    daemon's own code."""
    from contextfs.media.clip import Clip, ClipGate, ClipSpec

    s = MediaSettings()
    folder = Path(tempfile.mkdtemp(prefix="bench-clip-"))
    out = []
    try:
        for name in (tc.TINY_NAME, "ViT-B-32"):
            config, weights = tc.random_weights(folder, name)
            spec = ClipSpec(
                model=name if config is None else "",
                checkpoint=str(weights),
                model_config=str(config or ""),
            )
            gate = ClipGate(Clip(spec))
            gate.name = f"CLIP {name}, random weights"
            out.append((gate, s.clip_drop_above, s.clip_new_below))
        if not quick:
            print("training the tiny CLIP on coloured shapes ...", file=sys.stderr)
            config, weights = tc.train(folder / "trained", log=lambda m: print(m, file=sys.stderr))
            gate = ClipGate(Clip(ClipSpec(checkpoint=str(weights), model_config=str(config))))
            gate.name = f"CLIP {tc.TINY_NAME}, trained on coloured shapes"
            out.append((gate, s.clip_drop_above, s.clip_new_below))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return out


def visual(
    stream: list[tuple[bytes, bool]], gate=None, drop_above: float = 0.0, new_below: float = 0.0
) -> dict:
    s = MediaSettings()
    if gate is None:
        gate, drop_above, new_below = HashGate(), s.drop_above, s.new_below
    repeats = len(stream) // max(1, sum(1 for _, r in stream if not r))
    gate.signature(stream[0][0])  # warm (a model's first call allocates)
    last = None
    dropped = wrong_drops = wrong_keeps = 0
    scores: list[float] = []
    t0 = time.perf_counter()
    for data, repeat in stream:
        probe_image(data, ".png", s.max_pixels)
        sig = gate.signature(data)
        sim = gate.similarity(sig, last) if last is not None else None
        v = decide(sim, drop_above, new_below)
        if sim is not None:
            scores.append(sim)
        if v.kept:
            last = sig
            wrong_keeps += repeat
        else:
            dropped += 1
            wrong_drops += not repeat
    elapsed = time.perf_counter() - t0
    return {
        "gate": gate.name,
        "images": len(stream),
        "images_per_s": len(stream) / elapsed,
        "dropped_share": dropped / len(stream),
        "ideal_dropped_share": (repeats - 1) / repeats,
        "distinct_slides_dropped": wrong_drops,
        "repeats_kept": wrong_keeps,
        "median_score": statistics.median(scores) if scores else None,
        "drop_above": drop_above,
        "new_below": new_below,
    }


def recording(seconds: float, filler: str) -> tuple[bytes, float]:
    """About `seconds` of audio, 40% speech and 60% `filler` (silence or white noise)."""
    speech = [mc.pcm_of(mc.speech(t))[0] for t in SENTENCES]
    parts, total_speech, total = [], 0, 0
    i = 0
    while total < seconds * 16000:
        sp = speech[i % len(speech)]
        gap = int(len(sp) * 1.5)  # 1.5 x the speech: 60% of the whole
        if filler == "silence":
            fill = np.zeros(gap, np.int16)
        else:
            fill = mc.pcm_of(mc.sox_make(gap / 16000, "white", vol=0.3))[0][:gap]
        parts += [fill[: gap // 2], sp, fill[gap // 2 :]]
        total_speech += len(sp)
        total += len(sp) + gap
        i += 1
    return mc.wav_of(np.concatenate(parts)), total_speech / total


def audio(seconds: float) -> list[dict]:
    out = []
    for filler in ("silence", "white noise"):
        wav, speech_share = recording(seconds, "silence" if filler == "silence" else "noise")
        t0 = time.perf_counter()
        pcm = decode_audio(wav, ".wav")
        d = gate_audio(pcm, VadSettings())
        elapsed = time.perf_counter() - t0
        out.append(
            {
                "filler": filler,
                "audio_seconds": d.duration,
                "audio_s_per_s": d.duration / elapsed,
                "kept_share": d.speech_share,
                "true_speech_share": speech_share,
                "dropped_share": 1 - d.speech_share,
                "segments": len(d.segments),
            }
        )
    return out


def video(slides: int, seconds_each: float = 8.0) -> dict:
    """A screen recording of `slides` slides, each on screen for `seconds_each` seconds,
    over a 40%-speech track: through PyAV, the visual gate and the audio gate."""
    from contextfs.media.video import analyse_video

    s = MediaSettings()
    wav, speech_share = recording(slides * seconds_each, "silence")
    pictures = [mc.slide(f"{TOPICS[i % len(TOPICS)]} {i + 1}") for i in range(slides)]
    data = mc.video(pictures, seconds_each=seconds_each, wav=wav, fps=10)
    t0 = time.perf_counter()
    r = analyse_video(
        data, ".mp4", HashGate(), interval=s.video_frame_interval, drop_above=s.drop_above,
        new_below=s.new_below,
    )  # fmt: skip
    d = gate_audio(r.pcm, VadSettings())
    elapsed = time.perf_counter() - t0
    sampled, kept = len(r.frames), len(r.kept_frames)
    return {
        "slides": slides,
        "video_seconds": r.info.duration,
        "bytes": len(data),
        "video_s_per_s": r.info.duration / elapsed,
        "frames_sampled": sampled,
        "frames_kept": kept,
        "dropped_share": (sampled - kept) / sampled,
        "ideal_dropped_share": (sampled - slides) / sampled,
        "speech_kept_share": d.speech_share,
        "true_speech_share": speech_share,
    }


def stored_once(n: int) -> dict:
    """The same photo dropped n times into a mount's inbox, against n different photos:
    what the store keeps."""
    from contextfs.store import Store

    out = {}
    for label, photos in (
        ("same", [mc.noise_image(1)] * n),
        ("different", [mc.noise_image(100 + i) for i in range(n)]),
    ):
        tmp = Path(tempfile.mkdtemp(prefix="bench-media-"))
        try:
            data, mnt = tmp / "data", tmp / "mnt"
            data.mkdir()
            mnt.mkdir()
            (data / "config.yaml").write_text("search: false\n")
            m = DrainedMount(mnt, data)
            m.start()
            try:
                for i, blob in enumerate(photos):
                    src = tmp / f"p{i}.png"
                    src.write_bytes(blob)
                    subprocess.run(["cp", str(src), str(mnt / ".inbox" / src.name)], check=True)
                    report = mnt / ".inbox" / f"{src.name}.report.md"
                    t0 = time.perf_counter()
                    while "state: done" not in report.read_text():
                        if time.perf_counter() - t0 > 60:
                            raise SystemExit(f"{src.name}: no decision after 60 s")
                        time.sleep(0.01)
            finally:
                m.stop()
            store = Store(data / "contextfs.duckdb", read_only=True)
            held, stored = store.stored_bytes()
            store.close()
            out[label] = {
                "photo_bytes": sum(len(b) for b in photos),
                "held_bytes": held,
                "stored_bytes": stored,
                "db_file_bytes": (data / "contextfs.duckdb").stat().st_size,
            }
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def searchable(mnt: Path, word: str, t0: float) -> float:
    """Seconds from t0 until `.query/<word>/` ranks a node (BM25 answers from the start)."""
    while True:
        try:
            if any(n.startswith("01_") for n in os.listdir(mnt / ".query" / word)):
                return time.perf_counter() - t0
        except FileNotFoundError:
            pass
        if time.perf_counter() - t0 > 120:
            raise SystemExit(f"{word}: not searchable after 120 s")
        time.sleep(0.01)


def through_mount(slides: int, search: bool) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-media-"))
    try:
        data, mnt = tmp / "data", tmp / "mnt"
        data.mkdir()
        mnt.mkdir()
        (data / "config.yaml").write_text(f"search: {'true' if search else 'false'}\n")
        m = DrainedMount(mnt, data)
        m.start()
        latencies, found = [], []
        try:
            files = [
                (f"zebra{i}.png", mc.slide(f"{TOPICS[i % len(TOPICS)]} {i}")) for i in range(slides)
            ]
            memo = mc.concat(mc.sox_make(1), mc.speech(SENTENCES[0]), mc.sox_make(1))
            files.append(("memo.wav", memo))
            slides3 = [mc.slide(f"{TOPICS[i]} video") for i in range(3)]
            files.append(("talk.mp4", mc.video(slides3, seconds_each=4, wav=mc.concat(memo, memo))))
            for name, blob in files:
                src = tmp / name
                src.write_bytes(blob)
                subprocess.run(["cp", str(src), str(mnt / ".inbox" / name)], check=True)
                t0 = time.perf_counter()
                report = mnt / ".inbox" / f"{name}.report.md"
                while "state: done" not in report.read_text():
                    if time.perf_counter() - t0 > 60:
                        raise SystemExit(f"{name}: no decision after 60 s")
                    time.sleep(0.005)
                latencies.append((name, time.perf_counter() - t0))
                if search:  # the file name is in the node's L2
                    found.append(searchable(mnt, name.rsplit(".", 1)[0], t0))
        finally:
            m.stop()
        img = [t for n, t in latencies if n.endswith(".png")]
        return {
            "close_to_node_image_p50_ms": 1000 * statistics.median(img),
            "close_to_node_image_max_ms": 1000 * max(img),
            "close_to_node_audio_ms": 1000 * latencies[-2][1],
            "close_to_node_video_ms": 1000 * latencies[-1][1],
            "close_to_searchable_p50_ms": 1000 * statistics.median(found) if found else None,
            "close_to_searchable_max_ms": 1000 * max(found) if found else None,
            "problems": m.problems(),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-mount", action="store_true")
    p.add_argument(
        "--search", action="store_true", help="mount with search on: also time close → searchable"
    )
    p.add_argument("--json", default="bench-results/bench_media.json")
    args = p.parse_args()
    if mc.have_tools():
        print(mc.have_tools(), file=sys.stderr)
        return 2
    slides, repeats, seconds = (10, 4, 30.0) if args.quick else (40, 4, 120.0)
    print("bench_media: visual gates …", file=sys.stderr)
    streams = {k: slideshow(slides, repeats, k) for k in ("slides", "shapes")}
    gates = [(None, 0.0, 0.0), *clip_gates(args.quick)]
    vis = []
    for gate, drop_above, new_below in gates:
        for kind, stream in streams.items():
            print(f"visual gate {getattr(gate, 'name', 'hash')} on {kind} ...", file=sys.stderr)
            vis.append({"stream": kind, **visual(stream, gate, drop_above, new_below)})
    print("bench_media: audio gate …", file=sys.stderr)
    a = audio(seconds)
    print("bench_media: video …", file=sys.stderr)
    vid = video(5 if args.quick else 15)
    print("bench_media: bytes stored once …", file=sys.stderr)
    once = None if args.no_mount else stored_once(3 if args.quick else 10)
    print("bench_media: through a mount …", file=sys.stderr)
    mnt = None if args.no_mount else through_mount(3 if args.quick else 8, args.search)
    print("| measure | value |")
    print("|---|---|")
    for v in vis:
        print(
            f"| {v['gate']} (drop >= {v['drop_above']:g}): {v['images']} images "
            f"({slides} {v['stream']} x {repeats}) | "
            f"{v['images_per_s']:.1f} images/s; dropped {100 * v['dropped_share']:.0f}% "
            f"(ideal {100 * v['ideal_dropped_share']:.0f}%); distinct dropped "
            f"{v['distinct_slides_dropped']}, repeats kept {v['repeats_kept']}; median "
            f"similarity to the last kept {v['median_score']:.3f} |"
        )
    for r in a:
        print(
            f"| recording: {r['audio_seconds']:.0f} s, 40% speech, 60% {r['filler']} | "
            f"{r['audio_s_per_s']:.0f} s of audio/s; kept {100 * r['kept_share']:.0f}% "
            f"(true speech {100 * r['true_speech_share']:.0f}%), dropped "
            f"{100 * r['dropped_share']:.0f}%, {r['segments']} segments |"
        )
    print(
        f"| video: {vid['video_seconds']:.0f} s MP4 ({vid['bytes'] // 1024} KiB), "
        f"{vid['slides']} slides x 8 s, 40% speech | {vid['video_s_per_s']:.0f} s of video/s; "
        f"frames dropped "
        f"{100 * vid['dropped_share']:.0f}% (ideal {100 * vid['ideal_dropped_share']:.0f}%, "
        f"{vid['frames_kept']} of {vid['frames_sampled']} kept); speech kept "
        f"{100 * vid['speech_kept_share']:.0f}% (true {100 * vid['true_speech_share']:.0f}%) |"
    )
    if once is not None:
        for label, r in once.items():
            print(
                f"| {label} photo dropped: {r['photo_bytes'] // 1024} KiB of photos | "
                f"stored {r['stored_bytes'] // 1024} KiB of {r['held_bytes'] // 1024} KiB held "
                f"(inbox items + nodes); database file {r['db_file_bytes'] / 2**20:.1f} MiB |"
            )
    if mnt is not None:
        print(
            f"| close() → node, through a mount | image p50 "
            f"{mnt['close_to_node_image_p50_ms']:.0f} ms (max "
            f"{mnt['close_to_node_image_max_ms']:.0f} ms); voice memo "
            f"{mnt['close_to_node_audio_ms']:.0f} ms; 12 s video "
            f"{mnt['close_to_node_video_ms']:.0f} ms |"
        )
        if mnt["close_to_searchable_p50_ms"] is not None:
            print(
                f"| close() → `.query/<file name>/` ranks it (search on) | p50 "
                f"{mnt['close_to_searchable_p50_ms']:.0f} ms (max "
                f"{mnt['close_to_searchable_max_ms']:.0f} ms) |"
            )
    doc = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "quick": args.quick,
        "visual": vis,
        "audio": a,
        "video": vid,
        "stored_once": once,
        "mount": mnt,
    }
    print(f"\nJSON: {write_json(args.json, doc)}")
    return 1 if mnt and mnt["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
