"""Which API key an OpenAI-compatible endpoint gets (chat, embeddings, captions).

A hosted endpoint needs the key from the configured environment variable. A server on
this machine or on the local network (llama.cpp, Ollama, vLLM, LM Studio) usually checks
none, so there the variable is optional: the `openai` client insists on a non-empty key,
and it gets `NO_KEY`, a placeholder that grants nothing. Pure: no network, no DNS.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit

NO_KEY = "contextfs-no-key"  # sent as "Bearer contextfs-no-key" to a keyless local server

# Names that only resolve on this machine or a local network (RFC 6761, 6762, 8375), and
# the suffixes container and home networks use.
_LOCAL_SUFFIXES = (".localhost", ".local", ".lan", ".internal", ".home.arpa")


def is_local(base_url: str) -> bool:
    """Whether `base_url` names this host or a private network: `localhost`, a loopback,
    private, link-local or unique-local address, a name under a local-only suffix, or a
    single-label name (a container's service name, `http://ollama:11434/v1`). The name
    is not resolved: a public name that happens to point at a LAN address is remote."""
    try:
        host = (urlsplit(base_url).hostname or "").rstrip(".").lower()
    except ValueError:
        return False
    if not host:
        return False
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost" or host.endswith(_LOCAL_SUFFIXES) or "." not in host
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback or addr.is_private or addr.is_link_local


def api_key(base_url: str, api_key_env: str) -> str | None:
    """The key for `base_url`: the variable's value when it is set, `NO_KEY` for a local
    endpoint without one, None for a remote endpoint without one (the caller refuses)."""
    key = os.environ.get(api_key_env) if api_key_env else None
    if key:
        return key
    return NO_KEY if is_local(base_url) else None
