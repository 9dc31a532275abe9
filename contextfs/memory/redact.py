"""Secret redaction at the write boundary: text in, text with typed markers out.

Every writer (type-directory drops, `.inbox/`, session transcripts, edits of L2) passes
its content through a `Redactor` before anything is stored, versioned or indexed. A secret
value is replaced by `[REDACTED:<kind>]`; the surrounding text stays, and each
`Redaction` says where and what kind, never the secret itself. `secret_filename_reason`
refuses files whose *name* says they are a secret store (`.env`, `id_rsa`, `*.pem`, …).

Pure: no I/O, no logging, no store. Imports only the stdlib and `contextfs.errors`; the
memory service decides what to do with the result (log it, show it in `.status`).

Design notes (why, not what):
- Detectors are precise where a format is known (provider key prefixes, JWT, PEM) and
  conservative where it is not (`password=`-style assignments skip code expressions,
  type annotations, templates and placeholders): a false positive garbles a memory.
- Markers never match any detector (a match that overlaps a marker is dropped), and
  `redact` rescans its own output until nothing changes, so redaction is idempotent.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from contextfs.errors import InvalidInput

__all__ = [
    "BUILTIN_KINDS",
    "Redaction",
    "RedactResult",
    "Redactor",
    "marker",
    "secret_filename_reason",
]

_MARKER_RE = re.compile(r"\[REDACTED:[a-z0-9_]+\]")
_NAME_RE = re.compile(r"[a-z0-9_]+")
# A rescan of redacted output finds nothing in practice; the bound only guards a
# pathological user pattern against looping forever.
_MAX_PASSES = 4


@dataclass(frozen=True, slots=True)
class Redaction:
    """One removed secret: its kind and where it was in the original input."""

    kind: str
    start: int
    end: int
    line: int


@dataclass(frozen=True, slots=True)
class RedactResult:
    """The redacted text and what was removed from it, in order of position."""

    text: str
    redactions: tuple[Redaction, ...]

    @property
    def changed(self) -> bool:
        return bool(self.redactions)

    def summary(self) -> dict[str, int]:
        """kind -> count, for a log line or `.status`."""
        out: dict[str, int] = {}
        for r in self.redactions:
            out[r.kind] = out.get(r.kind, 0) + 1
        return out


def marker(kind: str) -> str:
    return f"[REDACTED:{kind}]"


# --------------------------------------------------------------------------- detectors

_Span = tuple[int, int]


@dataclass(frozen=True, slots=True)
class _Detector:
    kind: str
    pattern: re.Pattern[str]
    # Cheap prefilter: the regex runs only when one of these occurs in the text
    # (in the lower-cased text when `fold`). Empty means always run.
    anchors: tuple[str, ...]
    # The secret's span for a match, or None when the match is not a secret after all.
    span: Callable[[re.Match[str]], _Span | None]
    priority: int
    fold: bool = False
    # When set, candidate starts are found by this case-sensitive regex in the lower-cased
    # text and `pattern` is tried only there: much faster than a case-insensitive scan.
    seek: re.Pattern[str] | None = None


def _group(
    name: str | int,
    check: Callable[[str], bool] | None = None,
    edge: str = "",
) -> Callable[[re.Match[str]], _Span | None]:
    """The span of group `name`; `edge` lists characters that must not precede the match.

    The left edge is checked here rather than by a leading lookbehind so that the regex
    starts with a literal, which `re` finds with a fast scan.
    """

    def span(m: re.Match[str]) -> _Span | None:
        if m.start(name) < 0 or m.end(name) == m.start(name):
            return None
        if edge and m.start() > 0 and m.string[m.start() - 1] in edge:
            return None
        if check is not None and not check(m.group(name)):
            return None
        return m.span(name)

    return span


def _mixed(value: str) -> bool:
    """Looks random: letters and digits both present (a real key, not a word)."""
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _openai_body(value: str) -> bool:
    body = value[3:]
    # Random keys have a long unbroken run; CSS classes and slugs (`sk-foo-bar-…`) do not.
    longest = max((len(p) for p in re.split(r"[-_]", body)), default=0)
    return _mixed(body) and longest >= 16


def _upper_and_lower(value: str) -> bool:
    return any(c.isupper() for c in value) and any(c.islower() for c in value)


# Left and right edges of a token: not glued to other key characters.
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_R = r"(?![A-Za-z0-9_-])"


def _lb(width: int, chars: str = "A-Za-z0-9_+/-") -> str:
    """Placed right after a literal prefix of `width` characters: the prefix is not glued
    to a preceding key character. After the literal rather than before it, so that `re`
    still scans for the literal fast, and a prefix in the middle of a long run (base64
    full of `eyJ`) is refused at once instead of scanning the run again from each one.
    """
    return rf"(?<![{chars}][\s\S]{{{width}}})"


_PRIVATE_KEY_RE = re.compile(
    r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
    # The body never holds `-----`, so a BEGIN without an END stops at the next dashes
    # instead of scanning the rest of the text (no quadratic blow-up on many BEGINs).
    r"(?:(?:[^-]|-(?!----)){0,65536}?-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
    # A block cut off before its END line (a truncated paste): header and base64 lines.
    r"|(?:(?:\r?\n|\\r\\n|\\n)[ \t]*"
    r"(?:[A-Za-z0-9+/=]+(?=[ \t]*(?:\r?\n|\\[rn]|$))|[A-Z][A-Za-z-]+: [^\r\n\\]*))*)"
)


def _tok(
    kind: str,
    regex: str,
    anchors: tuple[str, ...],
    check: Callable[[str], bool] | None = None,
    prio: int = 1,
) -> _Detector:
    """A provider token: a literal prefix (with its `_lb` edge), a body, a right edge."""
    return _Detector(kind, re.compile(regex + _R), anchors, _group(0, check), prio)


_BUILTIN: list[_Detector] = [
    _Detector("private_key", _PRIVATE_KEY_RE, ("-----BEGIN",), _group(0), 0),
    _tok(
        "jwt", "eyJ" + _lb(3) + r"[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*", ("eyJ",)
    ),
    _tok("anthropic_key", "sk-ant-" + _lb(7) + r"[a-z]{2,8}\d{2}-[A-Za-z0-9_-]{20,}", ("sk-ant-",)),
    _tok("openai_key", "sk-" + _lb(3) + r"(?!ant-)[A-Za-z0-9_-]{32,}", ("sk-",), _openai_body, 2),
    _Detector(
        "aws_access_key",
        re.compile("(?:AKIA|ASIA)" + _lb(4, "A-Za-z0-9") + r"[A-Z0-9]{16}(?![A-Za-z0-9])"),
        ("AKIA", "ASIA"),
        _group(0),
        1,
    ),
    _Detector(
        "aws_secret_key",
        re.compile(
            r"(?i:aws[_-]?secret[_-]?(?:access[_-]?)?key|secret[_-]?access[_-]?key)"
            r"(?:\\?[\"'])?(?:[ \t]*(?::=|=>|[:=])[ \t]*|[ \t]+)(?:\\?[\"'])?"
            r"(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        ("secret",),
        _group("s", _upper_and_lower),
        1,
        fold=True,
        seek=re.compile(r"aws[_-]?secret|secret[_-]?access"),
    ),
    _tok(
        "github_token",
        rf"(?:gh[pousr]_{_lb(4)}[A-Za-z0-9]{{36,251}}|github_pat_{_lb(11)}[A-Za-z0-9_]{{22,}})",
        ("gh", "github_pat_"),
    ),
    _tok(
        "gitlab_token",
        "gl"
        + _lb(2)
        + r"(?:pat|ptt|dt|rt|cbt|oas|ft|agent|soat|imt)-[A-Za-z0-9_-]{20,}(?:\.[A-Za-z0-9_-]+)*",
        ("gl",),
    ),
    _Detector(
        "slack_webhook",
        re.compile(
            r"https://hooks\.slack\.com/(?:services|workflows|triggers)/"
            r"(?P<s>[A-Za-z0-9_/-]{16,})"
        ),
        ("hooks.slack.com",),
        _group("s"),
        0,
    ),
    _tok(
        "slack_token",
        rf"(?:xox{_lb(3)}[abposr]-[A-Za-z0-9-]{{10,}}|xapp-{_lb(5)}\d-[A-Za-z0-9]+-\d+-[A-Za-z0-9]+)",
        ("xox", "xapp-"),
        _mixed,
    ),
    _tok(
        "stripe_key",
        rf"(?:(?:sk|rk|pk)_{_lb(3)}(?:live|test)_[A-Za-z0-9]{{24,}}|whsec_{_lb(6)}[A-Za-z0-9]{{32,}})",
        ("_live_", "_test_", "whsec_"),
    ),
    _tok("google_api_key", "AIza" + _lb(4) + r"[0-9A-Za-z_-]{35}", ("AIza",)),
    _tok("google_oauth_secret", "GOCSPX-" + _lb(7) + r"[A-Za-z0-9_-]{24,}", ("GOCSPX-",)),
    _tok("google_oauth_token", r"ya29\." + _lb(5) + r"[A-Za-z0-9_-]{30,}", ("ya29.",)),
    _tok("huggingface_token", "hf_" + _lb(3) + r"[A-Za-z]{34,}", ("hf_",), _upper_and_lower),
    _tok("npm_token", "npm_" + _lb(4) + r"[A-Za-z0-9]{36}", ("npm_",), _mixed),
    _tok("pypi_token", "pypi-" + _lb(5) + r"AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}", ("pypi-",)),
    _Detector(
        "url_password",
        # The scheme does not matter; starting at `://` lets `re` scan for a literal.
        re.compile(
            r"://[^\s:/@?#\"'<>\\]*:(?P<s>(?!\[REDACTED:)[^\s/?#\"'<>\\]+)@(?=[A-Za-z0-9\[])"
        ),
        ("://",),
        _group("s", lambda v: not _is_placeholder(v)),
        3,
    ),
    _Detector(
        "bearer_token",
        re.compile(r"(?i)bearer[ \t]+(?P<s>[A-Za-z0-9._~+/-]{16,}=*)"),
        ("bearer",),
        _group("s", lambda v: _mixed(v) and not _is_placeholder(v), edge=_ALNUM),
        4,
        fold=True,
        seek=re.compile("bearer"),
    ),
    _Detector(
        "basic_auth",
        re.compile(
            r"(?i)authorization(?:\\?[\"'])?[ \t]*[:=][ \t]*(?:\\?[\"'])?basic[ \t]+"
            r"(?P<s>[A-Za-z0-9+/]{8,}={0,2})"
        ),
        ("basic",),
        _group("s"),
        4,
        fold=True,
        seek=re.compile("authorization"),
    ),
]

# `password=`-style assignments. The keyword ends the name (`DB_PASSWORD`, `apiKey`,
# `client_secret`, `x-api-key`); `max_tokens` or `password_hash_rounds` do not count.
# A flat alternation of literals lets `re` skip ahead by first character.
_KEYWORDS = (
    r"passwd|password|passphrase|pass|pwd|secret[_-]?key|secret|token"
    r"|api[_-]?key|apikey|private[_-]?key|access[_-]?key"
)
_QUOTED = (
    r"\\(?P<eq>[\"'])(?P<ev>[^\"'\\\r\n]*)\\(?P=eq)"
    r"|[fbru]{0,2}\"(?P<dv>(?:[^\"\\\r\n]|\\[^\r\n])*)\""
    r"|[fbru]{0,2}'(?P<sv>(?:[^'\\\r\n]|\\[^\r\n])*)'"
)
_BARE = r"(?P<bv>[^\s\"'`\\,;&|<>(){}\[\]]+)"
_ASSIGN_RE = re.compile(
    # `(?:\*\*|__)?`: markdown emphasis, as in `**Password:** hunter2`.
    rf"(?P<kw>{_KEYWORDS})(?P<kq>\\?[\"'])?(?:\*\*|__)?(?P<pre>[ \t]*)"
    rf"(?P<sep>:=|=>|=(?!=)|:(?!:))(?:\*\*|__)?(?P<post>[ \t]*)(?:{_QUOTED}|{_BARE})",
    re.I,
)
_CLI_RE = re.compile(
    r"--(?:[A-Za-z0-9]+-)*"
    r"(?P<kw>password|passwd|pass|token|secret|api-?key|(?:secret|private|access)-key)"
    rf"[ \t]+(?:{_QUOTED}|{_BARE})",
    re.I,
)
# `curl -u user:password`: the password after the first colon (a uid:gid pair is not one).
_USER_FLAG_RE = re.compile(
    r"(?:-u|--user)[ \t]+(?P<q>[\"']?)[^\s:\"'$]+:(?P<s>[^\s\"']+)(?P=q)(?![^\s\"'])"
)
_ASSIGN_ANCHORS = ("pass", "pwd", "secret", "token", "key")

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*(?:\??\.[A-Za-z_$][A-Za-z0-9_$]*)+")
# After a value that is not the end of a statement, a `:`/spaced-`=` form is prose or code.
_TERM_RE = re.compile(r"[ \t]*(?:$|[\r\n]|#|//|[,;})\]\\\"'`])")
_MASK_RE = re.compile(r"[*x.•·_\-#?]+|…+", re.I)
_PLACEHOLDER_PREFIX_RE = re.compile(
    r"(?:your|my|the|enter|insert|replace|put|some|example|dummy|fake|sample)[ _-]", re.I
)
_PLACEHOLDER_TEXT = """
    none null nil undefined true false yes no on off
    password passwd passphrase pass pwd secret token key apikey api_key
    changeme change_me change-me changeit example redacted hidden masked required optional
    empty todo tbd fixme n/a na string str bytes int bool boolean any number object text
    unknown secretstr secretbytes self this env await new lambda function async
"""
_PLACEHOLDER_WORDS = frozenset(_PLACEHOLDER_TEXT.split())
# Bare words that are code, not a literal: constants, `self`, type names in annotations.
_CODE_TEXT = """
    none null nil undefined true false self this cls await new lambda function async
    str string bytes int integer bool boolean float number any unknown object dict list
    optional secretstr secretbytes text varchar char
"""
_CODE_WORDS = frozenset(_CODE_TEXT.split())
_KEYWORD_PARTS = ("pass", "pwd", "secret", "token", "key", "cred", "auth")


def _is_placeholder(value: str) -> bool:
    """`<your password>`, `${DB_PASS}`, `sk-...`, `changeme`, `****`: not a real secret."""
    s = value.strip().strip("\"'")
    if not s or s[0] in "$%<{" or s.startswith("[REDACTED"):
        return True
    low = s.lower()
    if low in _PLACEHOLDER_WORDS or _MASK_RE.fullmatch(s):
        return True
    if "..." in s or "…" in s or "***" in s or "xxxx" in low:
        return True
    return bool(_PLACEHOLDER_PREFIX_RE.match(low) or low.endswith(("_here", "-here", " here")))


def _keyword_glued(text: str, start: int, kw: str) -> bool:
    """`compass`, `bypass`, `OLDPWD`: a short keyword inside a longer word is not one."""
    if start == 0 or len(kw) > 4 or kw.lower() not in ("pass", "pwd"):
        return False
    prev = text[start - 1]
    camel = prev.islower() and kw[0].isupper()
    return prev.isalnum() and not camel


def _assign_span(m: re.Match[str]) -> _Span | None:
    text = m.string
    group = m.lastgroup  # the value's group: the last one to close in every alternative
    if group is None:
        return None
    start, end = m.span(group)
    sep = m.group("sep")
    spaced = bool(m.group("pre") or m.group("post"))
    # `KEY=value` (env, query string, shell prefix) may be followed by anything; a `:` or
    # spaced `=` form must end its statement there, or it is prose (`password: the one…`)
    # or an expression (`token = prefix + t`).
    if (sep != "=" or spaced) and not _TERM_RE.match(text, m.end()):
        return None
    kw = m.group("kw")
    if _keyword_glued(text, m.start(), kw):
        return None
    value = text[start:end]
    if _is_placeholder(value):
        return None
    kw = kw.lower()
    if kw == "pwd" and value.startswith(("/", "~")):
        return None  # PWD=/home/alice is the working directory
    if group != "bv":
        if not value.strip() or ("{" in value and "}" in value):
            return None  # blank, or a template: f"{prefix}{n}", "{{ vault_pw }}"
        return start, end
    if text[end - 1] == "." and end - start > 1:
        end -= 1  # the full stop of a sentence, not part of the password
        value = value[:-1]
    if not _bare_value_ok(text, kw, value, end, sep == "=" and spaced, sep == "="):
        return None
    return start, end


def _bare_value_ok(
    text: str, kw: str, value: str, end: int, spaced_equals: bool, equals: bool
) -> bool:
    """An unquoted value: a literal secret, or code and prose that only look like one?"""
    if not any(c.isalnum() for c in value) or _is_placeholder(value):
        return False
    follow = text[end : end + 1]
    if follow in ("(", "["):
        return False  # a call or a subscript: getpass(), os.environ[...]
    if _DOTTED_RE.fullmatch(value):
        return False  # attribute access: settings.API_KEY, process.env.TOKEN
    if value.isdigit() and len(value) < 12 and not kw.startswith("pass") and kw != "pwd":
        return False  # max_token=512, x-api-key: 42 (a count, not a credential)
    if _IDENT_RE.fullmatch(value):
        low = value.lower()
        letters_only = value.replace("_", "").isalpha()
        if low in _CODE_WORDS:
            return False
        if letters_only and any(k in low for k in _KEYWORD_PARTS):
            return False  # password=password, token=new_token, api_key: ApiKey
        if letters_only and follow and follow in ",;)}":
            return False  # a keyword argument or object member naming a variable
        if spaced_equals and re.fullmatch(r"[a-z_]+", value):
            return False  # `token = tok`: a variable, not a literal
        if not equals and letters_only and value[0].isupper() and not value.isupper():
            return False  # `token: Tensor`: a type annotation
    return True


def _cli_span(m: re.Match[str]) -> _Span | None:
    if m.start() > 0 and m.string[m.start() - 1] in _ALNUM + "-":
        return None
    for g in ("ev", "dv", "sv"):
        if m.start(g) >= 0:
            value = m.group(g)
            if not value.strip() or _is_placeholder(value):
                return None
            return m.span(g)
    value = m.group("bv")
    if value.startswith("-") or _is_placeholder(value) or not any(c.isalnum() for c in value):
        return None
    return m.span("bv")


def _user_flag_span(m: re.Match[str]) -> _Span | None:
    if m.start() > 0 and not m.string[m.start() - 1].isspace():
        return None
    value = m.group("s")
    if value.isdigit() or _is_placeholder(value):
        return None
    return m.span("s")


_BUILTIN += [
    _Detector(
        "password_assignment",
        _ASSIGN_RE,
        _ASSIGN_ANCHORS,
        _assign_span,
        8,
        fold=True,
        # Only keywords followed by a separator are worth trying the full pattern at.
        seek=re.compile(rf"(?:{_KEYWORDS})(?=\\?[\"']?(?:\*\*|__)?[ \t]*[:=])"),
    ),
    _Detector("password_assignment", _CLI_RE, ("--",), _cli_span, 8),
    _Detector("password_assignment", _USER_FLAG_RE, ("-u", "--user"), _user_flag_span, 8),
]

BUILTIN_KINDS: frozenset[str] = frozenset(d.kind for d in _BUILTIN)


# --------------------------------------------------------------------------- redactor


class Redactor:
    """Finds secrets with the built-in detectors plus user patterns, and replaces them.

    `extra` maps a kind name (`[a-z0-9_]+`) to a regex. When the regex has a group named
    `secret`, only that group is replaced (`(?:acme_pin=)(?P<secret>\\d{6})`); otherwise the
    whole match is.
    """

    __slots__ = ("_detectors",)

    def __init__(self, extra: Mapping[str, str] | None = None) -> None:
        detectors = list(_BUILTIN)
        for name, source in (extra or {}).items():
            detectors.append(_user_detector(name, source))
        self._detectors: tuple[_Detector, ...] = tuple(detectors)

    def redact(self, text: str) -> RedactResult:
        return self._redact(text, ascii_only=False)

    def redact_bytes(self, data: bytes) -> tuple[bytes, tuple[Redaction, ...]]:
        """Redact UTF-8 text, or ASCII secrets inside other bytes.

        Offsets in the returned redactions are byte offsets into `data`. Bytes that are not
        valid UTF-8 are read as latin-1 (one character per byte), only all-ASCII secrets
        are replaced, and every other byte is kept as it was.
        """
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            result = self._redact(data.decode("latin-1"), ascii_only=True)
            return result.text.encode("latin-1"), result.redactions
        result = self._redact(text, ascii_only=False)
        if not result.redactions or text.isascii():
            return result.text.encode("utf-8"), result.redactions
        return result.text.encode("utf-8"), _to_byte_offsets(text, result.redactions)

    # -- internals

    def _redact(self, text: str, *, ascii_only: bool) -> RedactResult:
        # Replacements so far, in original coordinates: (start, end, kind), sorted.
        done: list[tuple[int, int, str]] = []
        current = text
        for _ in range(_MAX_PASSES):
            found = self._scan(current, ascii_only)
            if not found:
                break
            found = [(*_to_original(s, e, done), k) for s, e, k in found]
            done = sorted(done + found)
            current = _apply(text, done)
        if not done:
            return RedactResult(text, ())
        newlines = [i for i, c in enumerate(text) if c == "\n"] if "\n" in text else []
        redactions = tuple(
            Redaction(kind, s, e, bisect.bisect_left(newlines, s) + 1) for s, e, kind in done
        )
        return RedactResult(current, redactions)

    def _scan(self, text: str, ascii_only: bool) -> list[tuple[int, int, str]]:
        lowered: str | None = None
        candidates: list[tuple[int, int, int, str]] = []
        for det in self._detectors:
            if det.anchors:
                if det.fold:
                    if lowered is None:
                        lowered = _lower(text)
                    hay = lowered
                else:
                    hay = text
                if not any(a in hay for a in det.anchors):
                    continue
            for m in _matches(det, text, lowered):
                span = det.span(m)
                if span is None or span[0] == span[1]:
                    continue
                if ascii_only and not text[span[0] : span[1]].isascii():
                    continue
                candidates.append((det.priority, span[0], span[1], det.kind))
        if not candidates:
            return []
        # Existing markers are taken first so nothing ever matches inside or across one.
        taken = _Intervals((m.start(), m.end()) for m in _MARKER_RE.finditer(text))
        out: list[tuple[int, int, str]] = []
        for _prio, s, e, kind in sorted(candidates, key=lambda c: (c[0], c[1], -c[2])):
            if taken.add(s, e):
                out.append((s, e, kind))
        return sorted(out)


def _matches(det: _Detector, text: str, lowered: str | None) -> Iterator[re.Match[str]]:
    if det.seek is None:
        yield from det.pattern.finditer(text)
        return
    if lowered is None:
        lowered = _lower(text)
    end = 0
    for hit in det.seek.finditer(lowered):
        if hit.start() < end:
            continue
        m = det.pattern.match(text, hit.start())
        if m is not None:
            end = m.end()
            yield m


def _lower(text: str) -> str:
    """Lower-cased with offsets kept (a few characters lower-case to two)."""
    low = text.lower()
    return low if len(low) == len(text) else text.translate(_ASCII_LOWER)


_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


class _Intervals:
    """Disjoint half-open intervals; `add` refuses one that overlaps what is there."""

    __slots__ = ("_starts", "_ends")

    def __init__(self, spans: Iterable[_Span] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for s, e in spans:
            self.add(s, e)

    def add(self, start: int, end: int) -> bool:
        i = bisect.bisect_right(self._starts, start)
        if i > 0 and self._ends[i - 1] > start:
            return False
        if i < len(self._starts) and self._starts[i] < end:
            return False
        self._starts.insert(i, start)
        self._ends.insert(i, end)
        return True


def _apply(text: str, done: list[tuple[int, int, str]]) -> str:
    parts: list[str] = []
    pos = 0
    for s, e, kind in done:
        parts.append(text[pos:s])
        parts.append(marker(kind))
        pos = e
    parts.append(text[pos:])
    return "".join(parts)


def _to_original(start: int, end: int, done: list[tuple[int, int, str]]) -> _Span:
    """Map a span of the redacted text back to the original.

    A rescan never matches across a marker (markers are taken first), so the span lies in
    text that was copied unchanged and maps back by a constant shift.
    """
    shift = 0
    for s, e, kind in done:
        new_start = s + shift
        if new_start >= start:
            break
        shift += len(marker(kind)) - (e - s)
    return start - shift, end - shift


def _to_byte_offsets(text: str, redactions: tuple[Redaction, ...]) -> tuple[Redaction, ...]:
    out = []
    pos = 0
    bpos = 0
    for r in redactions:
        bpos += len(text[pos : r.start].encode("utf-8"))
        bstart = bpos
        bpos += len(text[r.start : r.end].encode("utf-8"))
        pos = r.end
        out.append(Redaction(r.kind, bstart, bpos, r.line))
    return tuple(out)


def _user_detector(name: str, source: str) -> _Detector:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise InvalidInput(f"redaction pattern name {name!r}: use lowercase letters, digits, _")
    if name in BUILTIN_KINDS:
        raise InvalidInput(f"redaction pattern {name!r}: the name of a built-in kind")
    if not isinstance(source, str):
        raise InvalidInput(f"redaction pattern {name!r}: the pattern must be a string")
    try:
        pattern = re.compile(source)
    except re.error as exc:
        raise InvalidInput(f"redaction pattern {name!r} does not compile: {exc}") from None
    if pattern.search("") is not None:
        raise InvalidInput(f"redaction pattern {name!r} matches the empty string")
    group: str | int = "secret" if "secret" in pattern.groupindex else 0
    return _Detector(name, pattern, (), _group(group), 5)


# --------------------------------------------------------------------------- file names

_SSH_KEY_RE = re.compile(r"id_(?:rsa|dsa|ecdsa|ed25519)(?:_sk)?(?:[._-][a-z0-9]+)*")
_SECRET_NAMES = {
    ".netrc": "a .netrc file (machine logins and passwords)",
    "_netrc": "a .netrc file (machine logins and passwords)",
    ".pgpass": "a PostgreSQL password file",
    ".my.cnf": "a MySQL client config (often holds a password)",
    ".npmrc": "an npm config (holds registry tokens)",
    ".pypirc": "a PyPI config (holds upload tokens)",
    ".git-credentials": "a git credential store",
    ".htpasswd": "an htpasswd file (password hashes)",
    ".dockercfg": "a Docker registry credential file",
    ".envrc": "a direnv file (exports environment secrets)",
    "credentials": "a cloud credentials file",
    "credentials.json": "a credentials file",
    "credentials.csv": "a credentials file",
    "service-account.json": "a service account key file",
    "secrets.json": "a secrets file",
    "secrets.yaml": "a secrets file",
    "secrets.yml": "a secrets file",
    "secrets.toml": "a secrets file",
    ".secrets": "a secrets file",
    "terraform.tfstate": "a Terraform state file (holds secrets in clear)",
}
_SECRET_SUFFIXES = {
    ".pem": "a PEM file (private keys, certificates)",
    ".key": "a private key file",
    ".p12": "a PKCS#12 key store",
    ".pfx": "a PKCS#12 key store",
    ".p8": "a PKCS#8 private key",
    ".jks": "a Java key store",
    ".keystore": "a key store",
    ".kdbx": "a KeePass password database",
    ".kdb": "a KeePass password database",
    ".ppk": "a PuTTY private key",
    ".keychain": "a macOS keychain",
    ".keychain-db": "a macOS keychain",
    ".tfstate": "a Terraform state file (holds secrets in clear)",
}


def secret_filename_reason(name: str) -> str | None:
    """Why a file with this name is refused as a secret store, or None when it is not one.

    Only the last path component counts. Public halves (`id_rsa.pub`) pass.
    """
    base = name.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    low = base.lower()
    if not low or low.endswith(".pub"):
        return None
    why: str | None = None
    if low == ".env" or low.startswith(".env.") or (low.endswith(".env") and low != ".env"):
        why = "an environment file (.env holds API keys and passwords)"
    elif _SSH_KEY_RE.fullmatch(low):
        why = "an SSH private key"
    elif low in _SECRET_NAMES:
        why = _SECRET_NAMES[low]
    elif low.startswith("client_secret") and low.endswith(".json"):
        why = "an OAuth client secret file"
    else:
        for suffix, what in _SECRET_SUFFIXES.items():
            if low.endswith(suffix) and len(low) > len(suffix):
                why = what
                break
    if why is None:
        return None
    return f"{base!r} looks like {why}; secret stores are refused, not remembered"
