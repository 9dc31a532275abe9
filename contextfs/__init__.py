"""ContextFS: an agent's long-term memory mounted as a FUSE filesystem."""

__version__ = "0.1.0"
