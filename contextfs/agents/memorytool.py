"""A vendor memory tool's `/memories` directory on a type directory of a mount.

Memory tools (Anthropic's `memory_20250818`) leave the storage to the client: six file
commands on a `/memories` directory — view (a directory, or a file with line numbers),
create, str_replace (of a unique string), insert (at a line), delete and rename. The
`anthropic` SDK's own `BetaLocalFilesystemMemoryTool` runs them on any folder; pointed at
a node of the mount it works, but what it writes are attachments, which are stored and not
searched. This adapter maps the directory onto memory instead:

    /memories/<name>.md  ⇄  <type directory>/<name>/L2.md   (one node per file)

so every create, edit, delete and rename is a save, a soft delete or a `mv` of a node,
versioned and searchable through `.query` like any other. The default place is an agent's
`patterns/` (docs/agents.md says why); any type directory can be given. Everything is a
path call on the mount: the mount decides, this module only translates. A refusal comes
back as `MountCallError` with the errno name and the reason from `.status`;
`anthropic_memory_tool()` wraps the adapter as the SDK's `BetaAbstractMemoryTool`.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from contextfs.agents.mountcalls import MountCallError, refusal

PREFIX = "/memories"
# The file number width and wording of the SDK's reference implementation, so an agent
# sees the same text whichever backend answers.
LINE_NUMBER_WIDTH = 6
# A node name of the slug templates (`{topic}`, `{name}`: reference.md, node files).
SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
SUFFIX = ".md"


def _numbered(lines: list[str], start: int) -> str:
    return "\n".join(
        f"{str(i + start).rjust(LINE_NUMBER_WIDTH)}\t{ln}" for i, ln in enumerate(lines)
    )


def _size(n: float) -> str:
    for unit in ("B", "K", "M"):
        if n < 1024:
            return f"{n}{unit}" if unit == "B" or n == int(n) else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}G"


@dataclass(frozen=True, slots=True)
class MemoryDirectory:
    """The six commands over `type_dir` (a type directory on a mount, e.g.
    `<mnt>/agent/claude/patterns`); `root` is the mountpoint, for `.status`."""

    root: Path
    type_dir: Path

    # ---- names -----------------------------------------------------------------------

    def node(self, path: str) -> Path:
        """The node directory of `/memories/<name>.md`; anything else is refused."""
        if path.rstrip("/") == PREFIX:
            raise MountCallError(f"EISDIR: {path} is the memory directory, not a file")
        if not path.startswith(PREFIX + "/"):
            raise MountCallError(f"EINVAL: a memory path starts with {PREFIX}/, got {path!r}")
        name = path[len(PREFIX) + 1 :]
        stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else ""
        if "/" in name or not SLUG.fullmatch(stem):
            raise MountCallError(
                f"EINVAL: {path!r}: a memory file is /memories/<name>.md directly in /memories, "
                "<name> in lower-case letters and digits joined by hyphens "
                "(e.g. /memories/deploy-lessons.md): each file is a memory node of that name"
            )
        return self.type_dir / stem

    def _tier(self, path: str) -> Path:
        node = self.node(path)
        if not node.is_dir():
            raise MountCallError(f"ENOENT: The path {path} does not exist.")
        return node / "L2.md"

    def _refused(self, exc: OSError, p: Path, what: str) -> MountCallError:
        return refusal(self.root, exc, p, what)

    def _read(self, path: str) -> str:
        tier = self._tier(path)
        try:
            return tier.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise self._refused(exc, tier, "read") from None

    def _save(self, tier: Path, text: str) -> None:
        # One open, write, close: the close is the commit and the new version.
        try:
            with open(tier, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as exc:
            raise self._refused(exc, tier, "write") from None

    # ---- the six commands ------------------------------------------------------------

    def view(self, path: str, view_range: list[int] | None = None) -> str:
        if path.rstrip("/") == PREFIX:
            try:
                names = sorted(
                    e.name for e in os.scandir(self.type_dir) if e.is_dir(follow_symlinks=False)
                )
            except OSError as exc:
                raise self._refused(exc, self.type_dir, "list") from None
            rows = [f"4K\t{PREFIX}"]
            for name in names:
                if name.startswith("."):
                    continue
                try:
                    size = (self.type_dir / name / "L2.md").stat().st_size
                except OSError:
                    continue  # a node being created or removed right now
                rows.append(f"{_size(size)}\t{PREFIX}/{name}{SUFFIX}")
            return (
                f"Here're the files and directories up to 2 levels deep in {path}, "
                "excluding hidden items:\n" + "\n".join(rows)
            )
        lines = self._read(path).split("\n")
        start = 1
        if view_range and len(view_range) == 2:
            first = max(1, view_range[0]) - 1
            end = len(lines) if view_range[1] == -1 else view_range[1]
            lines, start = lines[first:end], first + 1
        return f"Here's the content of {path} with line numbers:\n" + _numbered(lines, start)

    def create(self, path: str, file_text: str) -> str:
        node = self.node(path)
        try:
            node.mkdir()
        except FileExistsError:
            raise MountCallError(f"EEXIST: File {path} already exists") from None
        except OSError as exc:
            raise self._refused(exc, node, "mkdir") from None
        try:
            self._save(node / "L2.md", file_text)
        except MountCallError:
            # A refused first save must not leave an empty file in /memories: the node made
            # for it goes to the trash (its bytes are kept in the data dir's refused/).
            shutil.rmtree(node, ignore_errors=True)
            raise
        return f"File created successfully at: {path}"

    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        text = self._read(path)
        count = text.count(old_str)
        if count == 0:
            raise MountCallError(
                f"No replacement was performed, old_str `{old_str}` did not appear verbatim "
                f"in {path}."
            )
        if count > 1:
            at, lines = 0, []
            while (pos := text.find(old_str, at)) != -1:
                lines.append(text[:pos].count("\n") + 1)
                at = pos + 1
            raise MountCallError(
                f"No replacement was performed. Multiple occurrences of old_str `{old_str}` "
                f"in lines: {', '.join(map(str, lines))}. Please ensure it is unique"
            )
        changed = text[: text.find(old_str)].count("\n")
        self._save(self._tier(path), text.replace(old_str, new_str))
        # the snippet is what was stored: a secret in new_str is redacted at the write
        new_lines = self._read(path).split("\n")
        first = max(0, changed - 2)
        snippet = _numbered(new_lines[first : min(len(new_lines), changed + 3)], first + 1)
        return (
            "The memory file has been edited. Here is the snippet showing the change "
            "(with line numbers):\n" + snippet
        )

    def insert(self, path: str, insert_line: int, insert_text: str) -> str:
        text = self._read(path)
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if insert_line < 0 or insert_line > len(lines):
            raise MountCallError(
                f"Invalid `insert_line` parameter: {insert_line}. "
                f"It should be within the range [0, {len(lines)}]."
            )
        lines.insert(insert_line, insert_text.rstrip("\n"))
        self._save(self._tier(path), "\n".join(lines) + "\n")
        return f"The file {path} has been edited."

    def delete(self, path: str) -> str:
        if path.rstrip("/") == PREFIX:
            raise MountCallError("EPERM: Cannot delete the /memories directory itself")
        node = self.node(path)
        if not node.is_dir():
            raise MountCallError(f"ENOENT: The path {path} does not exist")
        # `rm -r` of a node is a soft delete: it goes to the owner's .trash, restorable
        try:
            shutil.rmtree(node)
        except OSError as exc:
            raise self._refused(exc, node, "delete") from None
        return f"Successfully deleted {path}"

    def rename(self, old_path: str, new_path: str) -> str:
        old, new = self.node(old_path), self.node(new_path)
        if not old.is_dir():
            raise MountCallError(f"ENOENT: The path {old_path} does not exist")
        if new.exists():
            raise MountCallError(f"EEXIST: The destination {new_path} already exists")
        try:
            os.rename(old, new)
        except OSError as exc:
            raise self._refused(exc, old, "rename") from None
        return f"Successfully renamed {old_path} to {new_path}"


def anthropic_memory_tool(directory: MemoryDirectory):
    """The adapter as the `anthropic` SDK's `BetaAbstractMemoryTool` (for its tool runner:
    `client.beta.messages.tool_runner(tools=[tool], …)`); refusals become its `ToolError`,
    which the runner returns to the model as an `is_error` result."""
    from anthropic.lib.tools import BetaAbstractMemoryTool, ToolError

    def run(fn, *args):
        try:
            return fn(*args)
        except MountCallError as exc:
            raise ToolError(str(exc)) from None

    class ContextFSMemoryTool(BetaAbstractMemoryTool):
        def view(self, command):
            return run(directory.view, command.path, command.view_range)

        def create(self, command):
            return run(directory.create, command.path, command.file_text)

        def str_replace(self, command):
            return run(directory.str_replace, command.path, command.old_str, command.new_str)

        def insert(self, command):
            return run(directory.insert, command.path, command.insert_line, command.insert_text)

        def delete(self, command):
            return run(directory.delete, command.path)

        def rename(self, command):
            return run(directory.rename, command.old_path, command.new_path)

    return ContextFSMemoryTool()
