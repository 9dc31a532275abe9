"""Media: decoding and the entropy gates of images and audio (SPEC §5, issue 12).

Pure functions over bytes: no store, no FUSE, no trio. `media.audio` decodes audio and runs
the voice-activity gate (webrtcvad + energy + spectral flatness); `media.visual` probes
images and runs the visual gate (a perceptual hash today; the `VisualGate` protocol is
where a CLIP gate slots in). What the gates decide becomes memory in
`conversations.media`.
"""

from __future__ import annotations

from contextfs.errors import InvalidInput


class BadMedia(InvalidInput):
    """Bytes that cannot be remembered as the media their name says (the reason says why)."""
