"""Images in, a verdict out: probing (format, size, EXIF capture time) and the visual gate.

The gate compares each image with the last image accepted in its stream and drops it
as redundant when they are too alike. How alike is the gate's business, behind the
`VisualGate` protocol: `HashGate` (today, no model needed) uses a 256-bit difference hash
(dHash: the image in grey at 17x16, one bit per horizontal neighbour pair saying which is
brighter), the similarity being the share of equal bits. The CLIP gate (`media.clip`, a
local checkpoint) implements the same protocol with an embedding and cosine similarity.

Decisions (`decide`): similarity >= `drop_above` → dropped as a near-duplicate; below
`new_below` → accepted as new; in between → accepted as a change of the same scene (the
report says so). Measured on generated images (tests/unit/test_media_gates.py): a
re-encoded (JPEG q70), downscaled or noisy (±20) copy scores 0.91-1.0, a slide of the
same layout with other text 0.80-0.83, another shape or colour 0-0.3, unrelated 0.
"""

from __future__ import annotations

import datetime as dt
import io
import warnings
from dataclasses import dataclass
from typing import Protocol

from contextfs.media import BadMedia

FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP", ".gif": "GIF"}
EXTENSIONS = {"PNG": "png", "JPEG": "jpg", "WEBP": "webp", "GIF": "gif"}


@dataclass(frozen=True, slots=True)
class ImageInfo:
    format: str  # PNG | JPEG | WEBP | GIF
    width: int
    height: int
    frames: int  # an animated GIF/WebP has more than one
    mode: str
    taken: str | None  # EXIF DateTimeOriginal as ISO 8601, when the file has it

    @property
    def extension(self) -> str:
        return EXTENSIONS[self.format]


@dataclass(frozen=True, slots=True)
class Verdict:
    kept: bool
    similarity: float | None  # to the last accepted image of the stream; None: first
    reason: str  # 'first of its stream' | 'new' | 'changed' | 'near-duplicate'


class VisualGate(Protocol):
    """What the inbox needs of a visual gate."""

    name: str  # what .status says

    def signature(self, data: bytes) -> object:
        """A comparable summary of an image (a hash, an embedding)."""
        ...

    def similarity(self, a: object, b: object) -> float:
        """1.0 for the same picture, about 0.5 (hash) or less (embedding) for unrelated."""
        ...


def _open(data: bytes):
    from PIL import Image

    try:
        with warnings.catch_warnings():
            # the size is checked by the caller against its own limit, before any decoding
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            return Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise BadMedia(f"the image is too large to decode: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - Pillow raises many kinds for bad bytes
        raise BadMedia(
            "the bytes are not a PNG, JPEG, WebP or GIF image (is the extension wrong?); "
            f"Pillow: {type(exc).__name__}"
        ) from None


def probe_image(data: bytes, suffix: str, max_pixels: int) -> ImageInfo:
    """Read the header and decode the image once (so a truncated file is found here):
    BadMedia for empty, unreadable, truncated, oversized or mislabelled-as-non-image bytes.
    A real image under another image extension (a JPEG named .png) is accepted; its
    format is what the bytes are."""
    if not data:
        raise BadMedia("the file is empty (0 bytes)")
    img = _open(data)
    fmt = img.format or "?"
    if fmt not in EXTENSIONS:
        raise BadMedia(f"{fmt} images are not taken (PNG, JPEG, WebP, GIF are)")
    w, h = img.size
    if w <= 0 or h <= 0:
        raise BadMedia("the image has no pixels")
    if w * h > max_pixels:
        raise BadMedia(
            f"the image is {w}x{h} ({w * h / 1e6:.0f} megapixels); the visual gate takes "
            f"at most {max_pixels / 1e6:.0f} megapixels (media_max_pixels)"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            img.load()
    except Exception as exc:  # noqa: BLE001 - truncated or corrupt data
        raise BadMedia(f"the {fmt} image is damaged or truncated: {exc}") from None
    return ImageInfo(fmt, w, h, int(getattr(img, "n_frames", 1) or 1), img.mode, _taken(img))


def _taken(img) -> str | None:
    """EXIF DateTimeOriginal (or DateTime) as ISO 8601; None when absent or unreadable."""
    try:
        exif = img.getexif()
        raw = exif.get_ifd(0x8769).get(0x9003) or exif.get(0x0132)
        if not raw:
            return None
        return dt.datetime.strptime(str(raw).strip("\x00 "), "%Y:%m:%d %H:%M:%S").isoformat()
    except Exception:  # noqa: BLE001 - EXIF in the wild is often broken; it is optional
        return None


@dataclass(frozen=True, slots=True)
class HashSignature:
    bits: int  # the difference hash, size*size bits
    thumb: bytes  # an RGB thumbnail, thumb*thumb pixels


def hash_signature(data: bytes, size: int = 16, thumb: int = 32) -> HashSignature:
    """The difference hash of an image in grey, and a small colour thumbnail."""
    from PIL import Image

    img = _open(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        img.seek(0)
        rgb = img.convert("RGB")
        grey = rgb.convert("L").resize((size + 1, size), Image.Resampling.BOX)
        small = rgb.resize((thumb, thumb), Image.Resampling.BOX)
    px = grey.tobytes()
    bits = 0
    for row in range(size):
        line = px[row * (size + 1) : (row + 1) * (size + 1)]
        for a, b in zip(line, line[1:], strict=False):
            bits = (bits << 1) | (b > a)
    return HashSignature(bits, small.tobytes())


class HashGate:
    """The visual gate without a model: a perceptual (difference) hash, which sees shape
    and layout, and a colour thumbnail, which sees what the hash cannot (the same shape
    in another colour, a line of text changed on a slide). The similarity is the lower
    of the two: the share of equal hash bits, and one minus the share of moved pixels
    (a colour channel moved by `tolerance` of 255 or more) in the block of the thumbnail
    (`block` x `block` pixels) that moved most. Re-encoding and sensor noise move few
    pixels anywhere; a changed line of text moves many in one block."""

    name = "perceptual hash (no CLIP checkpoint configured)"

    def __init__(
        self, size: int = 16, thumb: int = 64, block: int = 8, tolerance: int = 24
    ) -> None:
        if thumb % block:
            raise ValueError("the thumbnail is a whole number of blocks")
        self.size, self.thumb, self.block, self.tolerance = size, thumb, block, tolerance

    def signature(self, data: bytes) -> HashSignature:
        return hash_signature(data, self.size, self.thumb)

    def similarity(self, a: object, b: object) -> float:
        import numpy as np

        assert isinstance(a, HashSignature) and isinstance(b, HashSignature)
        hashed = 1.0 - bin(a.bits ^ b.bits).count("1") / (self.size * self.size)
        x = np.frombuffer(a.thumb, np.uint8).reshape(self.thumb, self.thumb, 3)
        y = np.frombuffer(b.thumb, np.uint8).reshape(self.thumb, self.thumb, 3)
        moved = np.abs(x.astype(np.int16) - y).max(axis=2) >= self.tolerance
        k = self.block
        blocks = moved.reshape(self.thumb // k, k, self.thumb // k, k).mean(axis=(1, 3))
        same = 1.0 - float(blocks.max())
        return round(min(hashed, same), 4)


def decide(similarity: float | None, drop_above: float, new_below: float) -> Verdict:
    """The policy: drop what is at least `drop_above` like the last accepted image."""
    if similarity is None:
        return Verdict(True, None, "first of its stream")
    if similarity >= drop_above:
        return Verdict(False, similarity, "near-duplicate")
    if similarity < new_below:
        return Verdict(True, similarity, "new")
    return Verdict(True, similarity, "changed")
