"""The built-in secret detectors of `memory.redact`: one table of patterns, each with the
check that tells a secret from an ordinary word.

What each provider's key looks like (prefixes, lengths, alphabets), JWTs, PEM private
keys and `password=`-style assignments, with the edges and placeholders that make a match
not a secret. Pure data and regexes: the scanning, markers and user patterns are
`memory.redact`, the only importer. A new built-in detector goes here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

Span = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Detector:
    """One kind of secret: where to look for it, and which part of a match is the secret."""

    kind: str
    pattern: re.Pattern[str]
    # Cheap prefilter: the regex runs only when one of these occurs in the text
    # (in the lower-cased text when `fold`). Empty means always run.
    anchors: tuple[str, ...]
    # The secret's span for a match, or None when the match is not a secret after all.
    span: Callable[[re.Match[str]], Span | None]
    priority: int
    fold: bool = False
    # When set, candidate starts are found by this case-sensitive regex in the lower-cased
    # text and `pattern` is tried only there: much faster than a case-insensitive scan.
    seek: re.Pattern[str] | None = None


def group_span(
    name: str | int,
    check: Callable[[str], bool] | None = None,
    edge: str = "",
) -> Callable[[re.Match[str]], Span | None]:
    """The span of group `name`; `edge` lists characters that must not precede the match.

    The left edge is checked here rather than by a leading lookbehind so that the regex
    starts with a literal, which `re` finds with a fast scan.
    """

    def span(m: re.Match[str]) -> Span | None:
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
) -> Detector:
    """A provider token: a literal prefix (with its `_lb` edge), a body, a right edge."""
    return Detector(kind, re.compile(regex + _R), anchors, group_span(0, check), prio)


BUILTIN: list[Detector] = [
    Detector("private_key", _PRIVATE_KEY_RE, ("-----BEGIN",), group_span(0), 0),
    _tok(
        "jwt", "eyJ" + _lb(3) + r"[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*", ("eyJ",)
    ),
    _tok("anthropic_key", "sk-ant-" + _lb(7) + r"[a-z]{2,8}\d{2}-[A-Za-z0-9_-]{20,}", ("sk-ant-",)),
    _tok("openai_key", "sk-" + _lb(3) + r"(?!ant-)[A-Za-z0-9_-]{32,}", ("sk-",), _openai_body, 2),
    Detector(
        "aws_access_key",
        re.compile("(?:AKIA|ASIA)" + _lb(4, "A-Za-z0-9") + r"[A-Z0-9]{16}(?![A-Za-z0-9])"),
        ("AKIA", "ASIA"),
        group_span(0),
        1,
    ),
    Detector(
        "aws_secret_key",
        re.compile(
            r"(?i:aws[_-]?secret[_-]?(?:access[_-]?)?key|secret[_-]?access[_-]?key)"
            r"(?:\\?[\"'])?(?:[ \t]*(?::=|=>|[:=])[ \t]*|[ \t]+)(?:\\?[\"'])?"
            r"(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        ("secret",),
        group_span("s", _upper_and_lower),
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
    Detector(
        "slack_webhook",
        re.compile(
            r"https://hooks\.slack\.com/(?:services|workflows|triggers)/"
            r"(?P<s>[A-Za-z0-9_/-]{16,})"
        ),
        ("hooks.slack.com",),
        group_span("s"),
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
    # Shapes detect-secrets knows and this table lacked (docs/secrets.md): taken by hand
    # rather than the library, whose entropy scan costs false positives and 2-9 ms a text.
    _tok("sendgrid_key", r"SG\." + _lb(3) + r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}", ("SG.",)),
    Detector(
        "twilio_key",
        # an API key sid (SK…); an account sid (AC…) is an identifier, not a secret
        re.compile("SK" + _lb(2, "A-Za-z0-9") + r"[0-9a-f]{32}(?![A-Za-z0-9])"),
        ("SK",),
        group_span(0),
        1,
    ),
    _tok("mailchimp_key", r"[0-9a-f]{32}-us\d{1,2}", ("-us",)),
    Detector(
        "discord_token",
        re.compile(
            r"(?<![A-Za-z0-9_-])[MNO][A-Za-z0-9]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}"
            + _R
        ),
        (".",),
        group_span(0, _mixed),
        1,
    ),
    Detector(
        "azure_storage_key",
        re.compile(r"(?i:accountkey|sharedaccesskey)=(?P<s>[A-Za-z0-9+/]{43,88}={0,2})"),
        ("key=",),
        group_span("s", _mixed),
        1,
        fold=True,
        seek=re.compile("(?:accountkey|sharedaccesskey)="),
    ),
    Detector(
        "url_password",
        # The scheme does not matter; starting at `://` lets `re` scan for a literal.
        re.compile(
            r"://[^\s:/@?#\"'<>\\]*:(?P<s>(?!\[REDACTED:)[^\s/?#\"'<>\\]+)@(?=[A-Za-z0-9\[])"
        ),
        ("://",),
        group_span("s", lambda v: not _is_placeholder(v)),
        3,
    ),
    Detector(
        "bearer_token",
        re.compile(r"(?i)bearer[ \t]+(?P<s>[A-Za-z0-9._~+/-]{16,}=*)"),
        ("bearer",),
        group_span("s", lambda v: _mixed(v) and not _is_placeholder(v), edge=_ALNUM),
        4,
        fold=True,
        seek=re.compile("bearer"),
    ),
    Detector(
        "basic_auth",
        re.compile(
            r"(?i)authorization(?:\\?[\"'])?[ \t]*[:=][ \t]*(?:\\?[\"'])?basic[ \t]+"
            r"(?P<s>[A-Za-z0-9+/]{8,}={0,2})"
        ),
        ("basic",),
        group_span("s"),
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
    r"|api[_ -]?key|apikey|private[_ -]?key|access[_ -]?key"
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
_SNAKE_RE = re.compile(r"[a-z]+(?:_[a-z]+)+")


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


def _assign_span(m: re.Match[str]) -> Span | None:
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
        if _SNAKE_RE.fullmatch(value) and any(k in value for k in _KEYWORD_PARTS):
            return None  # a name for one: TOKEN = "split_token", key: "api_key"
        return start, end
    if text[end : end + 1] in "'’" and text[end + 1 : end + 2].isalpha():
        return None  # a contraction in prose: "this is secret: I'm going to …"
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


def _cli_span(m: re.Match[str]) -> Span | None:
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


# `mysql -pSECRET`, `sshpass -p SECRET`: `-p` is a password only for these commands (for
# ssh, docker and most others it is a port).
_GLUED_FLAG_RE = re.compile(
    r"(?:(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\b[^\n|;&]{0,200}?[ \t]-p"
    r"|sshpass[ \t]+-p[ \t]*)"
    r"(?:'(?P<sv>[^'\r\n]+)'|\"(?P<dv>[^\"\r\n]+)\"|(?P<bv>[^\s\"'`;&|]+))"
)


def _glued_flag_span(m: re.Match[str]) -> Span | None:
    if m.start() > 0 and m.string[m.start() - 1] not in " \t\n;|&(`$\"'":
        return None
    for g in ("sv", "dv", "bv"):
        if m.start(g) >= 0:
            value = m.group(g)
            if _is_placeholder(value) or value.startswith("-"):
                return None
            return m.span(g)
    return None


def _user_flag_span(m: re.Match[str]) -> Span | None:
    if m.start() > 0 and not m.string[m.start() - 1].isspace():
        return None
    value = m.group("s")
    if value.isdigit() or _is_placeholder(value):
        return None
    return m.span("s")


BUILTIN += [
    Detector(
        "password_assignment",
        _ASSIGN_RE,
        _ASSIGN_ANCHORS,
        _assign_span,
        8,
        fold=True,
        # Only keywords followed by a separator are worth trying the full pattern at.
        seek=re.compile(rf"(?:{_KEYWORDS})(?=\\?[\"']?(?:\*\*|__)?[ \t]*[:=])"),
    ),
    Detector("password_assignment", _CLI_RE, ("--",), _cli_span, 8),
    Detector("password_assignment", _USER_FLAG_RE, ("-u", "--user"), _user_flag_span, 8),
    Detector("password_assignment", _GLUED_FLAG_RE, ("-p",), _glued_flag_span, 8),
]

# ---- keyword secrets in prose: "my password is …", "the wifi password is "…"", "my aws
# secret is …", "use … as the password". A keyword, a linking verb, then a value that
# looks like a credential. Strong keywords name a credential whatever follows (password,
# passphrase, passcode, PIN): a value with a digit, a symbol or inner capitals will do,
# and a dictionary word will not (`the password is required`; `the password is swordfish`
# is a known miss). Weak keywords (secret, token, key) also name ordinary things (`the
# secret is patience`, `the token is valid`), so their value must look random.

_STRONG = r"password|passwd|passphrase|passcode|pass[ \t]code|pw|pwd|pin(?:[ \t]code)?"
_WEAK = (
    r"secret(?:[ \t_-]?key)?|(?:access|auth|api|bearer|refresh)[ \t_-]?token|token"
    r"|api[ \t_-]?key|apikey|access[ \t_-]?key|private[ \t_-]?key"
)
_PROSE_KW_RE = re.compile(rf"(?:(?P<strong>{_STRONG})|(?P<weak>{_WEAK}))(?![A-Za-z0-9])", re.I)
# Up to three words of what the credential is for: "the password for the office printer".
_QUALIFIER_RE = re.compile(r"[ \t]+(?:for|to|of|on|at|in|into|with)(?=[ \t])", re.I)
_WORD_RE = re.compile(r"[ \t]{1,8}[\w.@'/-]{1,64}")
_LINK_RE = re.compile(
    r"(?:'s|’s)[ \t]+"
    r"|[ \t]+(?:is|was|are|were|=)(?:[ \t]+(?:now|still|currently|just|always|simply))?"
    r"(?:[ \t]+(?:set|changed|reset|updated)[ \t]+to)?[ \t]*:?[ \t]+"
    r"|[ \t]+(?:has[ \t]+been[ \t]+|had[ \t]+been[ \t]+|got[ \t]+)?"
    r"(?:set|changed|reset|updated)[ \t]+to[ \t]+",
    re.I,
)
_QUALIFIED_LINK_RE = re.compile(r"[ \t]*(?::|=|->)[ \t]*")
_TO_RE = re.compile(r"[ \t]+to[ \t]+", re.I)
_BARE_LINK_RE = re.compile(r"[ \t]+")
_PROSE_QUOTED_RE = re.compile(r"([\"'`“‘])([^\"'`“”‘’\r\n]{1,64})([\"'`”’])")
_PROSE_BARE_RE = re.compile(r"[^\s\"'`<>()\[\]{}]{1,128}")
_SYMBOLS = set("!@#$%^&*+=?~_|\\/;:")


def _credential_like(value: str, strong: bool) -> bool:
    if _is_placeholder(value) or _DOTTED_RE.fullmatch(value):
        return False
    digit = any(c.isdigit() for c in value)
    alpha = any(c.isalpha() for c in value)
    if strong:
        if value.isdigit():
            return 4 <= len(value) <= 12
        inner_caps = any(c.isupper() for c in value[1:]) and any(c.islower() for c in value)
        symbol = alpha and any(c in _SYMBOLS for c in value)
        return len(value) >= 4 and (digit or symbol or inner_caps)
    return len(value) >= 8 and digit and alpha


def _prose_value(text: str, pos: int, strong: bool, bare_link: bool = False) -> Span | None:
    q = _PROSE_QUOTED_RE.match(text, pos)
    if q is not None and not bare_link:
        value = q.group(2)
        ok = strong or _credential_like(value, strong)
        if value.strip() and not _is_placeholder(value) and ok:
            return q.span(2)
        return None
    b = _PROSE_BARE_RE.match(text, pos)
    if b is None:
        return None
    start, end = b.span()
    while end > start and text[end - 1] in ".,;:?)]}>”’":
        end -= 1  # a sentence's punctuation, not part of the value; `!` stays (often is)
    value = text[start:end]
    if bare_link and not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return None  # "password espresso4life" without a verb: only a mixed value
    if bare_link and len(value) < 6:
        return None
    return (start, end) if _credential_like(value, strong) else None


def _prose_span(m: re.Match[str]) -> Span | None:
    text = m.string
    if m.start() > 0 and text[m.start() - 1].isalnum():
        return None  # bypass, spin, OLDPWD: the keyword inside a longer word
    strong = m.group("strong") is not None
    pos = m.end()
    ends = [pos]
    qual = _QUALIFIER_RE.match(text, pos)
    if qual is not None:
        at = qual.end()
        for _ in range(3):
            w = _WORD_RE.match(text, at)
            if w is None:
                break
            at = w.end()
            ends.append(at)
    for i, at in enumerate(ends):
        link = _LINK_RE.match(text, at)
        if link is None and i > 0:
            link = _QUALIFIED_LINK_RE.match(text, at)
        if link is None and i == 0 and strong:
            link = _TO_RE.match(text, at)  # "changed the root password to …"
        if link is not None:
            span = _prose_value(text, link.end(), strong)
            if span is not None:
                return span
    if strong:
        link = _BARE_LINK_RE.match(text, pos)
        if link is not None:
            return _prose_value(text, link.end(), strong, bare_link=True)
    return None


_USE_AS_RE = re.compile(
    r"(?i:use|used|using|try|tried)[ \t]+(?P<q>[\"'`]?)(?P<s>[^\s\"'`]{4,64})(?P=q)[ \t]+"
    r"(?i:as)[ \t]+(?:(?i:the|my|our|your|a|an|his|her|their)[ \t]+)?(?:[\w-]+[ \t]+)?"
    rf"(?i:{_STRONG})(?![A-Za-z0-9])"
)


# A superset of what `_prose_span` accepts after a keyword, checked while seeking.
_LINK_AHEAD = (
    r"(?=(?:'s|’s)[ \t]|[ \t]*(?::|=|->)|[ \t]+(?:is|was|are|were|to|set|changed|reset"
    r"|updated|has|had|got|for|of|on|at|in|into|with)(?![a-z0-9])|[ \t]+[^\s]*[0-9])"
)


def _use_as_span(m: re.Match[str]) -> Span | None:
    if m.start() > 0 and m.string[m.start() - 1].isalnum():
        return None
    return m.span("s") if _credential_like(m.group("s"), True) else None


BUILTIN += [
    Detector(
        "keyword_secret",
        _PROSE_KW_RE,
        ("pass", "pw", "pin", "secret", "token", "key"),
        _prose_span,
        9,
        fold=True,
        # a whole keyword at a word start: far fewer tries than its letters anywhere
        # and only where a link can follow: most keywords in text are just words
        seek=re.compile(rf"\b(?:{_STRONG.lower()}|{_WEAK.lower()})(?![a-z0-9]){_LINK_AHEAD}"),
    ),
    Detector(
        "keyword_secret",
        _USE_AS_RE,
        (" as ",),
        _use_as_span,
        9,
        fold=True,
        seek=re.compile(r"(?:use|used|using|try|tried)[ \t]"),
    ),
]

BUILTIN_KINDS: frozenset[str] = frozenset(d.kind for d in BUILTIN)
