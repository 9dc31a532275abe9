"""The built-in secret detectors of `memory.redact`: one table of patterns, each with the
check that tells a secret from an ordinary word.

What each provider's key looks like (prefixes, lengths, alphabets), JWTs, PEM private
keys, `password=`-style assignments, secrets told in natural language (keywords in many
languages, PINs and lock codes, passphrases, seed phrases, login/password pairs) and the
first part of a token cut at the end of a write, with the edges and placeholders that make
a match not a secret. Pure data and regexes: the scanning, markers and user patterns are
`memory.redact`, the only importer. A new built-in detector goes here.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
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
    # The secret's span for a match, or None when the match is not a secret after all
    # (or the spans of several: the rows of a table under its header).
    span: Callable[[re.Match[str]], Span | list[Span] | None]
    priority: int
    fold: bool = False
    # When set, candidate starts are found by this case-sensitive regex in the lower-cased
    # text and `pattern` is tried only there: much faster than a case-insensitive scan.
    seek: re.Pattern[str] | None = None
    # When set, `pattern` is tried only on the last `tail` characters of a content text
    # (never a name): a token cut at the end of a write (`CUT_TOKENS`).
    tail: int = 0
    # A secret only text tells (a word shaped like a password, a recovery phrase): not
    # looked for in bytes that are not text, whose printable runs hold such shapes by
    # chance (a picture's bytes: `Ab3!kQz9`)
    prose: bool = False


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


def _url_password_span(m: re.Match[str]) -> Span | None:
    """The password of `scheme://user:password@host`; not `https://a:b@…` (an example: no
    password is one or two characters) nor a CVS root's method and user
    (`cvs://:pserver:anoncvs@…`, where the user is empty)."""
    value = m.group("s")
    if len(value) < 3 or _is_placeholder(value):
        return None
    if m.start("s") == m.start() + 4 and ":" in value:
        return None
    return m.span("s")


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
    Detector(
        "aws_secret_key",
        # the secret told after its key id: `AKIA… with secret …`, `AKIA… / …`
        re.compile(
            # (not the body of another token: `sk-proj…`)
            r"(?:AKIA|ASIA)[A-Z0-9]{16}[^\n]{1,40}?(?<![A-Za-z0-9/+_-])(?P<s>[A-Za-z0-9/+]{40})"
            r"(?![A-Za-z0-9/+=])"
        ),
        ("AKIA", "ASIA"),
        group_span("s", lambda v: _upper_and_lower(v) and any(c.isdigit() for c in v)),
        1,
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
    _tok(
        "hubspot_token",
        "pat-" + _lb(4) + r"(?:na|eu|ap)\d-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}",
        ("pat-",),
    ),
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
        _url_password_span,
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

# ---- code and markup that only look like a secret ----------------------------------------
# Source code and markup copied into a node hold a keyword and a value that are not a
# secret: Perl's `pass => 1` and `'Test2::Event::Pass' => '1.302103'`, Python's
# `token=EOF`, an HTML `accesskey="n"`, `max_token => 10_000`, `"Token: ", $token->dump`,
# a docstring's `pass force_zip64 to use …`. These checks are shared by the assignment,
# keyword and shape detectors (`_is_code`, `_code_name`).

# a number literal, a version or a grammar's repetition, not a password: `10_000`, `2.02`,
# `1.302103`, `3.15_06`, `1*tchar`
_NUMBER_LITERAL_RE = re.compile(r"\d[\d_]*_\d+|\d+(?:\.\d+)+(?:_\d+)?|\d*\*\d*[A-Za-z][\w-]*")
# a variable interpolated after a number: `"1E$scale"`, `10$unit`
_INTERPOLATED_RE = re.compile(r"[^a-z$]*\$[a-z_]+")
# a package, a member or a method: `Some::Module`, `v8::Object`, `$token->dump`
_QUALIFIED_RE = re.compile(r"[$@%]?[A-Za-z_]\w*(?:(?:::|->)[A-Za-z_]\w*)+(?:\(\))?")
# an HTML entity: `&#x3C;string>`, `&quot;`, `&lt;`
_ENTITY_RE = re.compile(r"&(?:[A-Za-z]{2,8}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});")
# a name of code in snake case whose parts start with a letter (`force_zip64`,
# `utf8_mode`); `bluebell_1966`, a word and a number, may be a password
_SNAKE_CODE_RE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z][a-z0-9]*)+")
# words that make a name with a keyword at its end name something else than the secret:
# a count or a limit (`max_token`, `num_tokens`), a flag (`HAVE_STRUCT_PASSWD_PW_PASSWD`,
# `use_password`), what is public (`publicKeyToken`), a parser's or a tokenizer's token
# (`PullParserToken`, `next_token`, `eos_token`)
_NOT_SECRET_NAME_TEXT = """
    max min num n count total limit len length size public pub have has struct is use
    enable parser lexer tokenizer type kind class next prev last first cur start end eof
    bos eos pad unk sep cls mask
"""
_NOT_SECRET_NAME_WORDS = frozenset(_NOT_SECRET_NAME_TEXT.split())
_NAME_WORD_RE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def _is_code(value: str) -> bool:
    """A value that is code or markup, not a literal secret: a package or a member
    (`Some::Module`, `v8::Object`, `$token->dump`), HTML (`&#x3C;string>`, `&quot;`), a
    number literal or a version (`10_000`, `2.02`), a variable after a number
    (`1E$scale`), a path (`/Users/maciej`) or a string's escaped line break."""
    if _QUALIFIED_RE.fullmatch(value) or _ENTITY_RE.search(value):
        return True
    if _NUMBER_LITERAL_RE.fullmatch(value) or _INTERPOLATED_RE.fullmatch(value):
        return True
    if value.startswith(("/", "~/")) and value.count("/") > 1:
        return True
    return "\\n" in value  # `'pass': 'The "pass" statement\\n'`: text


def _code_name(text: str, kw_start: int) -> bool:
    """The name that ends in a keyword at kw_start names no secret: a package
    (`Pod::Simple::PullParserToken`, `Test2::Event::Pass`) or a name with a word of
    `_NOT_SECRET_NAME_WORDS` (`max_token`, `publicKeyToken`)."""
    i = kw_start
    while i > max(0, kw_start - 80) and (text[i - 1].isalnum() or text[i - 1] in "_.:-"):
        i -= 1
    name = text[i:kw_start]
    if not name:
        return False
    if "::" in name:
        return True
    return any(w.lower() in _NOT_SECRET_NAME_WORDS for w in _NAME_WORD_RE.findall(name))


def _not_code(
    span: Callable[[re.Match[str]], Span | None],
) -> Callable[[re.Match[str]], Span | None]:
    """`span`, with the values that are code or markup left alone (`_is_code`; after
    `pass`, a name in snake case: Python's `pass force_zip64 to use …`)."""

    def guarded(m: re.Match[str]) -> Span | None:
        found = span(m)
        if found is None:
            return None
        text = m.string
        value = text[found[0] : found[1]]
        if _is_code(value):
            return None
        entity = _ENTITY_RE.search(text, found[0], found[1] + 9)
        if entity is not None and entity.start() < found[1]:
            return None  # `3r3sO&quot;`, `incorrect.&quot;`: the value runs into markup
        if m.group().lower() == "pass" and _SNAKE_CODE_RE.fullmatch(value):
            return None
        return found

    return guarded


def _open_quote(text: str, pos: int) -> str:
    """The quote of a string literal still open at pos on its line, or ''."""
    q, i = "", max(text.rfind("\n", 0, pos) + 1, pos - 400)
    while i < pos:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if not q and c in "\"'`":
            q = c
        elif c == q:
            q = ""
        i += 1
    return q


_TAG_OPEN_RE = re.compile(r"<[A-Za-z][^<>\n]*\Z")


def _code_assignment(m: re.Match[str], start: int, quoted: bool) -> bool:
    """An assignment's match that is code, not a secret given a value: a name that names
    no secret, a quote that closes the string the keyword is in (`"Token: ", $token->dump`,
    `'… token: "' . $unk->raw . '"'`), a ternary's branches (`? "PASS" : "FAIL"`), an HTML
    `accesskey` attribute."""
    text, kw_start = m.string, m.start("kw")
    if _code_name(text, kw_start):
        return True
    kq = m.group("kq")
    if quoted and not kq:
        q = _open_quote(text, kw_start)
        if q and (text[start - 1] == q or q in text[start : m.end()]):
            return True
    if kq and m.group("sep") == ":":
        i = kw_start - 1  # `cond ? "PASS" : "FAIL"`
        if i >= 0 and text[i] == kq[-1] and text[max(0, i - 8) : i].rstrip().endswith("?"):
            return True
    if m.group("kw").lower() == "accesskey":
        line = text.rfind("\n", 0, kw_start) + 1
        return _TAG_OPEN_RE.search(text, line, kw_start) is not None
    return False


# the name of a hash, a cipher or an encoding taken for a value (`aes-256-gcm`, `sha-256`,
# `pbkdf2-sha512`, `utf-8`)
_ALGORITHM_RE = re.compile(
    r"(?:scram-|hmac-|pbkdf2-|ssh-)?(?:sha-?(?:1|224|256|384|512)|sha3-\d{3}|md5|blake2[bs]?"
    r"|aes-?(?:128|192|256)(?:-(?:gcm|cbc|ctr|ecb|ccm|ofb|cfb|xts|siv))?|rsa(?:-?\d{3,4})?"
    r"|ed25519|ecdsa(?:-p?\d{3})?|argon2(?:id|i|d)?|bcrypt|scrypt|pbkdf2|chacha20(?:-poly1305)?"
    r"|utf-?(?:8|16|32)|latin-?1|iso-8859-\d{1,2})",
    re.I,
)
# a file's path under a folder, with its suffix: `index/bert.py`, `src/main.rs`
_REL_PATH_RE = re.compile(r"[\w-]+(?:/[\w.-]+)*/[\w-]+\.[A-Za-z]{1,5}")
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
# what a placeholder that starts with `your`, `my`, `the`… names (`the_api_key`)
_PLACEHOLDER_NOUN_TEXT = """
    pw pin code value data me it here credentials creds username user login name id
    secrets tokens keys passwords word phrase
"""
_PLACEHOLDER_NOUNS = _PLACEHOLDER_WORDS | frozenset(_PLACEHOLDER_NOUN_TEXT.split())
# Bare words that are code, not a literal: constants, `self`, type names in annotations.
_CODE_TEXT = """
    none null nil undefined undef eof nan inf true false self this cls await new lambda
    function async
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
    if low.endswith(("_here", "-here", " here")):
        return True
    if not _PLACEHOLDER_PREFIX_RE.match(low):
        return False
    # `your_password`, `the api key`, `enter-token-here`; not a phrase that starts with
    # such a word (`my cat likes tuna`, `the cat sat on my keyboard again`)
    words = re.split(r"[ _-]+", low)
    # (the noun of a phrase comes early: `the cat sat on my keyboard` is no placeholder)
    named = words[1:] if " " not in s else words[1:3]
    return len(words) <= 2 or any(w in _PLACEHOLDER_NOUNS for w in named)


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
    if _is_placeholder(value) or len(value.strip()) < 3 or (value.isdigit() and len(value) < 4):
        return None  # `pass => 1`, `accesskey="n"`, `'HAVE_STRUCT_PASSWD_PW_PASSWD': 1`
    if _code_assignment(m, start, group != "bv"):
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
    if value.isdigit() or value.startswith(":") or _is_placeholder(value):
        return None  # `perldoc -u Some::Module`: a package, not a user and a password
    return m.span("s")


BUILTIN += [
    Detector(
        "password_assignment",
        _ASSIGN_RE,
        _ASSIGN_ANCHORS,
        _not_code(_assign_span),
        8,
        fold=True,
        # Only keywords followed by a separator are worth trying the full pattern at.
        seek=re.compile(rf"(?:{_KEYWORDS})(?=\\?[\"']?(?:\*\*|__)?[ \t]*[:=])"),
    ),
    Detector("password_assignment", _CLI_RE, ("--",), _cli_span, 8),
    Detector("password_assignment", _USER_FLAG_RE, ("-u", "--user"), _user_flag_span, 8),
    Detector("password_assignment", _GLUED_FLAG_RE, ("-p",), _glued_flag_span, 8),
]

# ---- keyword secrets in prose ---------------------------------------------------------
# "my password is …", "PIN: 4921", "Her password? It's …", "mot de passe : …", "the alarm
# code is 4471-9902", "my ssh passphrase is correct horse battery staple", "seed phrase:
# twelve words". A keyword, a link (a verb, a colon, a question and its answer), then a
# value that looks like what the keyword names:
# - strong keywords name a credential whatever follows (password in a dozen languages and
#   its shorthands, passcode, PIN, passphrase): a value with a digit, a symbol or inner
#   capitals will do, a dictionary word will not (`the password is required`; `the
#   password is swordfish` is a known miss);
# - numeric keywords (PIN, PUK, passcode, door/alarm/gate/safe codes, combinations) take
#   a code: 3 to 12 digits, or groups joined by dashes (`36-12-27`), `#`/`*` at an end;
# - phrase keywords (passphrase) also take several plain words, and seed keywords (seed
#   phrase, recovery phrase, mnemonic, "12 words") take a run of 12 to 24 lowercase words:
#   every word is the secret;
# - weak keywords (secret, token, key) also name ordinary things (`the secret is
#   patience`, `the token is valid`), so their value must look random.


def _trie(words: Iterable[str]) -> str:
    """A regex for any of these lower-case words (a space stands for a blank), factored by
    common prefix: `re` then tries one branch per character instead of every word, which
    kept a scan with the 150 keywords below as fast as one with 20 (a flat alternation
    was three times slower). The longest word wins where several match."""
    tree: dict[str, dict] = {}
    for w in words:
        node = tree
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict[str, dict]) -> str:
        alts = [
            (r"[ \t]" if ch == " " else re.escape(ch)) + build(sub)
            for ch, sub in sorted(node.items())
            if ch
        ]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        if "" in node:
            return body + "?" if len(alts) == 1 and len(body) == 1 else f"(?:{body})?"
        return body

    return build(tree)


def _words(text: str) -> list[str]:
    return text.split()


def _joined(firsts: Iterable[str], seps: Iterable[str], lasts: Iterable[str]) -> list[str]:
    return [a + s + b for a in firsts for s in seps for b in lasts]


_PHRASE_WORDS = ("passphrase", "pass phrase", "pass-phrase")
_STRONG_WORDS = (
    *_PHRASE_WORDS,
    *_words("""password passwd passw0rd p@ssword p@ssw0rd p4ssword p4ssw0rd pa$$word pa$$w0rd pa$$
    p@ss pword pswd psw p/w pwd pw passcode pin puk passwort kennwort contraseña clave senha
    pasword passwrod passowrd paswword pssword passwrd paasword passwod pasword paswd
    pasuwado pasuwaado pasuwādo pasuwaado paswoord contrasena mdp passkey passnumber
    wachtwoord lösenord lösenordet hasło haslo heslo salasana şifre şifresi sifre parola
    пароль adgangskode adgangskoden passord passordet lozinka jelszó pass contra
    katalaluan parolă contrasenya pasahitza geslo slaptažodis parool парола лозинка
    nenosiri kodeord kodeordet lykilorð पासवर्ड পাসওয়ার্ড گذرواژه รหัสผ่าน"""),
    "kata laluan",
    "رمز عبور",
    "كلمة السر",
    "كلمة المرور",
    "κωδικός πρόσβασης",
    "pass code",
    "pin code",
    *_joined(["pin", "puk"], (" ", "-"), _words("number nummer code kode koodi")),
    "pincode",
    *_joined(_words("code codice número numero numéro código"), [" "], ["pin"]),
    "geheimzahl",
    "geheimnummer",
    "mot de passe",
    "kata sandi",
    "secret answer",
    "security answer",
    "memorable word",
    "pass number",
    "psk",
    "pre-shared key",
    "preshared key",
    "enable secret",
    "app password",
    "mat khau",
    "mật khẩu",
    "anshou bangou",
    "anshō bangō",
    *_joined(_words("wifi wi-fi wlan wpa wpa2 wpa3 wep network wireless"), ("", " ", "-"), ["key"]),
    *_words("wifi wi-fi wlan"),
)
_SEED_WORDS = (
    "mnemonic",
    "seed",
    *_joined(["frase"], [" "], _words("semilla semente")),
    "frase de recuperación",
    "frase de recuperacion",
    "phrase de récupération",
    *_joined(
        ("", "secret "),
        _words("recovery seed backup mnemonic wallet"),
        _joined([" ", "-"], [""], _words("phrase words seed")),
    ),
    *_joined(_words("12 24 twelve twenty-four"), (" ", "-"), ("word", "words")),
)
# What a code opens, named alone: its code only after a colon, ending the clause
# (`- **Alarm:** 4826`, not `alarm 0630`).
_LOCK_ALONE_TEXT = "alarm gate door safe garage shed locker lock"
_LOCK_ALONE = frozenset(_words(_LOCK_ALONE_TEXT))
# A code of no named kind: a secret only when a lock noun says what it opens.
_PLAIN_CODES = frozenset(
    _words("code codice código codigo kode koden koodi kod kód codul codi код кодом קוד הקוד رمز")
)
_LOCK_CODE_WORDS = (
    "combination",
    "combo",
    *_words("combinación combinacion combinaison combinazione combinatie kombination"),
    "collection code",
    "pickup code",
    "pick-up code",
    "guard code",
    "security number",
    *_PLAIN_CODES,
    *_joined(
        _words("""door alarm gate garage keypad safe lock lockbox locker padlock entry entrance
        access disarm security unlock duress bathroom restroom toilet mailbox keybox keysafe
        master"""),
        (" ", "-"),
        ["code"],
    ),
    *_words("""lockbox keybox keysafe padlock keypad digicode türcode torcode portcode
    portkod portkoden dørkode dørkoden porttikoodi ovikoodi"""),
    *_words(_LOCK_ALONE_TEXT),
    "key box",
    "key safe",
    "bike lock",
    "combination lock",
)
_WEAK_WORDS = (
    "secret",
    "token",
    "key",
    "apikey",
    *_joined(["secret"], ("", " ", "_", "-"), ["key"]),
    *_joined(_words("access auth api bearer refresh"), ("", " ", "_", "-"), ["token"]),
    *_joined(_words("api access private"), ("", " ", "_", "-"), ["key"]),
)
_PROSE_KW_RE = re.compile(
    rf"(?:(?P<strong>{_trie(_STRONG_WORDS)})|(?P<seed>{_trie(_SEED_WORDS)})"
    rf"|(?P<code>{_trie(_LOCK_CODE_WORDS)})|(?P<weak>{_trie(_WEAK_WORDS)}))(?![A-Za-z0-9_])",
    re.I,
)
_KEYWORDS_ALL = (*_STRONG_WORDS, *_SEED_WORDS, *_LOCK_CODE_WORDS, *_WEAK_WORDS)
# Keywords whose value may be a bare code: `PIN 4921`, `door code 1397#`.
_NUMERIC_KW = re.compile(
    r"pin|puk|pass[ \t]?code|.*code$|combina.*|kombination|combo|pin[ -].*|.*[ ]pin"
    r"|geheim(?:zahl|nummer)|security number",
    re.I,
)
# What a plain `code` must be for (`the code to the storage unit is 6614`, `the one-time
# code they texted me was 482913`), and where a plain `key` is a wifi key (`ssid:
# CoffeeBar, key: …`).
_LOCK_NOUN_RE = re.compile(
    r"\b(?:door|gate|safe|lock|alarm|garage|shed|unit|locker|box|house|flat|apartment"
    r"|entrance|building|storage|vault|cabinet|padlock|keypad|phone|iphone|ipad|tablet|laptop"
    r"|computer|bike|car|bathroom|restroom|toilet|wc|mailbox|lobby|elevator|lift|porte|portail"
    r"|puerta|portón|portal|alarma|alarme|allarme|cancello|portone|kluis|deur|tür|haustür|tor"
    r"|tresor|trezor|cofre|caja|cadeado|candado|cadenas|lucchetto|kłódka|sejf|drzwi|brama|immeuble"
    r"|intercom|interphone|domofon|citofono|portero|nøglebok|nøkkelbok|nyckelbox|fietsslot"
    r"|cykellås|sykkellås|fahrradschloss|schlüsselkast|sleutelkast|garasje|branka|branky"
    r"|brána|brány|dveří|ovi|portti|porta|interfon|під'їзд|подъезд|домофон|דלת|הדלת|אזעקה|האזעקה"
    r"|כספת|הכספת|باب|الباب|بوابة|البوابة|خزنة|الخزنة"
    r"|room|office|gym|pool|studio|cupboard|drawer|portão|portao|portaria|hek|poort|voordeur"
    r"|achterdeur|brievenbus|schuur|berging|furtk|bramk|garaż|skrytk|szafk|skrzynk|piwnic"
    r"|armadiett|cassaforte|cantina|vestiaire|casier|coffre|spind|briefkasten|schlie(?:ß|ss)fach"
    r"|zahlenschloss|keller|trastero|buzón|buzon|taquilla|armário|armario|cacifo"
    # what an office or a venue keys a code into
    r"|photocopier|copier|printer|franking|till|voicemail|answerphone|fob|barrier|turnstile"
    r"|shutter|hatch|cage|disarm|unlock)\w{0,3}\b",
    re.I,
)
# A one-time code or a card's, named right before a plain `code` (`your login code is
# 604913`, `ATM code 8824`): a secret like a lock's.
_OTP_BEFORE_RE = re.compile(
    r"\b(?:atm|card|one[- ]time|otp|2fa|mfa|sms|login|sign[- ]?in|verification|steam[ \t]+guard"
    # whose code on a till or a panel: `supervisor code 9021`, `installer code 1234`
    r"|supervisor|manager|installer|engineer|admin|guest|owner|override)"
    r"[ \t-]*\Z",
    re.I,
)
# A plain `code` after one of these is no secret: `the zip code for the house is 30301`.
_NOT_SECRET_CODES = frozenset(
    _words("""
    zip postal post area country error status exit return promo discount coupon voucher
    gift source bar qr dress building reference confirmation tracking product
    colour color language currency airport station tax sort swift routing bank iata icao
    """)
)
_WIFI_RE = re.compile(r"ssid|wi-?fi|wlan|wpa|wireless", re.I)
_ROUTER_RE = re.compile(r"\b(?:router|wi-?fi|wlan|ssid)\b", re.I)
# Up to three words of what the credential is for: "the password for the office printer",
# "le mot de passe du routeur", "Passwort für das WLAN".
_QUALIFIER_RE = re.compile(
    r"[ \t]+(?:for|to|of|on|at|in|into|with|du|de|des|del|della|dello|di|do|da|dos|für|fürs"
    r"|van|voor|för|till|til|zu|pour|next[ \t]+to|by|near|behind|under|outside|inside|beside"
    r"|from|off|4|od|na|para|per|pro|от|для|до|на|від|за|vom|von|beim|zum|zur)"
    r"(?=[ \t])|[ \t]+(?:dell|dall|nell|sull|dello|d|l)['’](?=[^\W\d_])",
    re.I,
)
_WORD_RE = re.compile(r"[ \t]{1,8}[\w.@'/-]{1,64}(?::[^\W\d_]{1,3}\b)?")  # `wifi:t`
_GLUED_WORD_RE = re.compile(r"[\w.@/-]{1,64}")
_ADVERBS = (
    r"now|still|currently|just|always|simply|literally|probably|basically|actually"
    r"|definitely|really|also|again|officially"
)
_VERBS = (
    r"is|was|are|were|=|est|c'est|c’est|ist|lautet|war|es|era|é|è|är|er|je|jest|sont|wa|la|là|on"
    # `is` in more languages: Malay, Indonesian, Tagalog, Swahili, Romanian, Catalan,
    # Lithuanian, Latvian, Greek, Bulgarian, Serbian, Russian, Hindi, Persian, Thai, Dutch
    r"|adalah|ialah|ay|ni|este|és|yra|ir|είναι|е|је|это|है|است|คือ|zijn|sind|son"
    r"|(?:will|would|should|shall|has[ \t]+to|is[ \t]+going[ \t]+to)[ \t]+be"
    r"|equals|equal[ \t]+to"
)
_LINK_RE = re.compile(
    rf"(?:'s|’s)(?:[ \t]+(?:{_ADVERBS}))?[ \t]+"
    rf"|[ \t]+(?:{_VERBS})(?:[ \t]+(?:{_ADVERBS})){{0,2}}"
    r"(?:[ \t]+(?:set|changed|reset|updated|rotated|switched)[ \t]+to)?[ \t]*:?[ \t]+"
    r"|[ \t]+(?:has[ \t]+been[ \t]+|had[ \t]+been[ \t]+|got[ \t]+)?"
    r"(?:set|changed|reset|updated|rotated|switched|rolled[ \t]+over)[ \t]+to[ \t]+"
    # "my old password, it was …", "the safe opens with …"
    r"|,?[ \t]+(?:it|that)(?:'s|’s|[ \t]+(?:is|was))[ \t]+|,?[ \t]+which[ \t]+(?:is|was)[ \t]+"
    r"|[ \t]+(?:opens|unlocks)[ \t]+with[ \t]+"
    r"|,?[ \t]+is[ \t]+it[ \t]+|,[ \t]*(?:currently|now)[ \t]*:?[ \t]+"
    r"|[ \t]+(?:mudou|mudei|cambió|cambié|changé)[ \t]+(?:para|pra|a|en)[ \t]+",
    re.I,
)
# `password: …`, and in markdown `**Password:** …`, `**Password**: …`
_COLON_LINK_RE = re.compile(
    r"[ \t]*(?:\*\*|__)?(?::|=>?|->|→|(?<=[ \t])[-–—](?=[ \t]))(?:\*\*|__)?[ \t]*"
)
# A question and its answer: "Her password? It's …", "Q: router password? A: …".
_QA_LINK_RE = re.compile(
    r"(?:[ \t]+(?:again|now|exactly|pls|please|nochmal|again,?[ \t]+please))?"
    r"[ \t]*\?+(?:[ \t]*\r?\n[ \t]*(?:>[ \t]*)?(?:[A-Z][\w.'’-]{0,20}[ \t]*:[ \t]*)?|[ \t]+)"
    r"(?:(?:a|answer)[ \t]*[:.)-][ \t]*)?"
    r"(?:(?:oh|ok|okay|um|uh|well|yes|yeah|yep|sure|hmm)[ \t]*[,.!]*[ \t]+)?"
    r"(?:(?:it'?s|it’s|it[ \t]+is|it[ \t]+was|that'?s|that’s|try|use)[ \t]*:?[ \t]+)?",
    re.I,
)
_TO_RE = re.compile(r"[ \t]+(?:to|as)[ \t]+", re.I)  # "changed … to …", "gave the PIN as …"
_BARE_LINK_RE = re.compile(r"[ \t]+")
# "Password is the same as last year: Snowfall2023!", "her password is her cat plus the
# year, Tigger2008.": a verb, a few words, a colon or a comma, a value ending the sentence.
_WORDS_SAID_RE = re.compile(r"\b(?:words|phrase|sentence)\b", re.I)
_LATE_COLON_RE = re.compile(
    r"[ \t]+(?:is|was|got)[ \t]+[^\n.?!:;,→]{1,60}?(?:[:,→]|[ \t]so)[ \t]+", re.I
)
_SENTENCE_END_RE = re.compile(r"[.!?]?(?:[ \t]*$|[ \t]*\n|[ \t]+[A-Z])", re.M)
# An aside between a keyword and its link: "the wifi password (case sensitive) is …",
# "the password, if you need it, is …".
_ASIDE_RE = re.compile(
    r",?[ \t]+(?:spelled|spelt|letter[ \t]+by[ \t]+letter)(?:[ \t]+out)?(?=[ \t]*:)"
    r"|[ \t]*\([^()\n]{1,40}\)|,[ \t]+[^,\n]{1,40},(?=[ \t])"
)
_PROSE_QUOTED_RE = re.compile(r"([\"'`“‘])([^\"'`“”‘’\r\n]{1,64})([\"'`”’])")
_PROSE_BARE_RE = re.compile(r"[^\s\"'`<>()\[\]{}]{1,128}")
# a keypad's digits, a combination, or a digicode's letter and digits (`B1984`)
_CODE_VALUE_RE = re.compile(
    r"(?:\d{1,4}(?:[-–]\d{1,4}){1,5}|\d{1,2}(?:[ ]\d{1,2}){2,7}(?![ ]?\d)|[#*]?[A-Z]?\d{3,12})[#*]?"
    # a dial's turns: `L12 R36 L4`, `R 22 L 8 R 40`, `left 24, right 11, left 38`
    r"|(?:(?:[LR]|(?i:left|right))[ ]?\d{1,2}[ ]*,?[ ]+){2,5}(?:[LR]|(?i:left|right))[ ]?\d{1,2}\b"
)
_PHRASE_WORDS_RE = re.compile(r"[A-Za-z0-9][\w'’-]*(?:[ \t]+[A-Za-z0-9][\w'’-]*){0,9}")
_JOINED_WORDS_RE = re.compile(r"[a-z]+(?:[-.][a-z0-9]+){2,}", re.I)
_SEED_WORDS_RE = re.compile(r"[A-Za-z][a-z]{2,7}(?:[ \t]+[a-z]{3,8}){11,23}(?![A-Za-z0-9])")
# Words that end a passphrase told with a verb, or show that what follows the verb is a
# description (`the passphrase is too long to type`), not the phrase.
_PHRASE_STOP = frozenset(
    _words("""
    a an the this that these those it its in on at to of for by with from into and or but
    not never no too very so than then as if when where which who is are was were be been
    being has have had will would can could should must may might do does did don't isn't
    required optional stored kept saved written shown hidden given known encrypted hashed
    case sensitive long short easy hard easier harder longer shorter weak strong unique
    random same different there here
    """)
)
# Words that start a new clause after a passphrase.
_CLAUSE_WORDS = frozenset(
    _words("""and but so because which who then if when or unless until since though although
    while whereas i we you he she they it is are was were""")
)
# First words after a colon that start an instruction, not a phrase: `passphrase: use …`.
_PHRASE_START_STOP = frozenset(
    _words("use see set enter type choose pick none required optional must should at least any")
)
_SYMBOLS = set("!@#$%^&*+=?~_|\\/;:")


_MEASURE_RE = re.compile(
    r"v?\d+(?:\.\d+){1,3}[a-z]?|\d+(?:[.,]\d+)?(?:ghz|mhz|mbps|gbps|kbps|kb|mb|gb|tb|ms|s|h|min"
    r"|px|dpi|dbm|chars?|characters|digits?|letters?|%|x)|[€$£¥]\d+(?:[.,]\d+)?|\d+(?:[.,]\d+)?[€$£¥]",
    re.I,
)


def _credential_like(value: str, strong: bool) -> bool:
    if _is_placeholder(value) or _DOTTED_RE.fullmatch(value):
        return False
    if value.startswith(("/", "~/", "./", "../")) or _REL_PATH_RE.fullmatch(value):
        return False  # a path: PWD=/home/alice, `the forward pass is index/bert.py`
    if _ALGORITHM_RE.fullmatch(value):
        return False  # `password auth (scram-sha-256)`: how passwords are kept, not one
    if _MEASURE_RE.fullmatch(value) or "://" in value:
        return False  # `v2.3.1`, `5GHz`, `12chars`, `€150`, a URL
    if _SNAKE_RE.fullmatch(value):
        return False  # a name: `= key_password`
    digit = any(c.isdigit() for c in value)
    alpha = any(c.isalpha() for c in value)
    if strong:
        if value.isdigit():
            return 4 <= len(value) <= 12
        inner_caps = any(c.isupper() for c in value[1:]) and any(c.islower() for c in value)
        symbol = alpha and any(c in _SYMBOLS for c in value)
        return len(value) >= 4 and (digit or symbol or inner_caps)
    return len(value) >= 8 and digit and alpha


def _password_like(value: str) -> bool:
    """Looks like a password with no keyword to vouch for it: letters, digits and a capital
    or a symbol (`Binge#Watch3`), not a word, a number, a path or an address."""
    if len(value) < 6 or _is_placeholder(value) or "/" in value or "@" in value[1:-1]:
        return False
    digit = any(c.isdigit() for c in value)
    alpha = any(c.isalpha() for c in value)
    upper = any(c.isupper() for c in value)
    symbol = any(c in _SYMBOLS for c in value)
    return digit and alpha and (upper or symbol) and not _DOTTED_RE.fullmatch(value)


def _password_at(text: str, pos: int) -> Span | None:
    """The bare word at pos, its sentence's punctuation trimmed, if it looks like a
    password on its own (`_password_like`)."""
    b = _PROSE_BARE_RE.match(text, pos)
    if b is None:
        return None
    end = _trim(text, b.start(), b.end())
    return (b.start(), end) if _password_like(text[b.start() : end]) else None


def _trim(text: str, start: int, end: int) -> int:
    while end > start and text[end - 1] in ".,;:?)]}>”’":
        end -= 1  # a sentence's punctuation, not part of the value; `!` stays (often is)
    return end


_DIGIT_WORDS = (
    "zero|oh|nought|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen"
    "|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty"
    "|seventy|eighty|ninety"
)
# a code read out, as a voice message writes it
_SPOKEN_DIGIT = rf"(?:(?:double|triple)[ \t]+)?(?:{_DIGIT_WORDS})"  # `double one two three`
_SPOKEN_CODE_RE = re.compile(rf"(?i:{_SPOKEN_DIGIT})(?:[ \t,-]+(?i:{_SPOKEN_DIGIT})){{2,11}}\b")


def _code_value(text: str, pos: int) -> Span | None:
    m = _CODE_VALUE_RE.match(text, pos) or _SPOKEN_CODE_RE.match(text, pos)
    if m is None or _glued(text, m.end()):
        return None
    return m.span()


def _glued(text: str, end: int) -> bool:
    """The value goes on past what was matched (`4471abc`, `12.5`, `2024-03-15`)."""
    nxt = text[end : end + 1]
    return bool(nxt) and (nxt.isalnum() or (nxt in ".-:/" and text[end + 1 : end + 2].isalnum()))


def _phrase_value(text: str, pos: int, verb: bool) -> Span | None:
    """Several words after a passphrase keyword: to the end of the clause, at least 3."""
    joined = _JOINED_WORDS_RE.match(text, pos)
    if joined is not None and not _glued(text, joined.end()):
        return joined.span()  # lemon-ocean-garden-piano
    m = _PHRASE_WORDS_RE.match(text, pos)
    if m is None:
        return None
    words = m.group().split()
    first = words[0].lower()
    if first in _PHRASE_START_STOP or (verb and first in _PHRASE_STOP):
        return None
    if verb:  # `is correct horse battery staple`: up to a word that ends the phrase
        n = next((i for i, w in enumerate(words) if w.lower() in _PHRASE_STOP), len(words))
        if n >= 3:  # `purple elephants dance at midnight`: to the end of the clause
            n = next((i for i, w in enumerate(words) if w.lower() in _CLAUSE_WORDS), len(words))
        words = words[:n]
    elif 2 * sum(w.lower() in _PHRASE_STOP for w in words) >= len(words):
        return None  # `passphrase: the one on the sticky note`: a description
    if len(words) < 3:
        return None
    end = pos
    for w in words:
        end = text.index(w, end) + len(w)
    end = _trim(text, pos, end)
    after = text[end : end + 1]
    if after and after not in " \t\r\n.,;!?\"'”’)":
        return None
    return pos, end


# a small word quoted right after a password keyword: `the phone banking password
# "tangerine"` (a label would be capitalised: `the field "Password"`)
_QUOTED_WORD_RE = re.compile(r"[a-z]{4,24}")


def _joined_value(text: str, pos: int) -> Span | None:
    """Three words or more joined by hyphens after a password keyword and its link
    (`heslo na wifi je pivo-a-knedlik`, `mot de passe : bienvenue-chez-nous`), not a
    description (`hard-to-guess`, `up-to-date`) nor a name of code (`aes-256-gcm`)."""
    m = _HYPHEN_WORDS_RE.match(text, pos)
    if m is None or _glued(text, m.end()):
        return None
    parts = m.group().lower().split("-")
    if parts[0] in _DESCRIBING or parts[0] in _PHRASE_STOP or parts[0] in _NOT_JOINED_FIRST:
        return None
    return m.span()


# Words told with how they are written: `velvet canyon lamp orbit, all lowercase with
# spaces`, `coffeeandcroissants (all one word)`, `the owls are not what they seem (spaces
# included)`: what is said of them is said of a password.
_WRITTEN_RE = re.compile(
    r"[a-z][a-z'’]{1,23}(?:[ \t]+[a-z][a-z'’]{0,23}){0,7}(?=[ \t]*[,(—–-]?[ \t]*(?:all[ \t]+)?"
    r"(?:lower[ -]?case|small[ \t]+letters|in[ \t]+small|with[ \t]+spaces|spaces[ \t]+included"
    r"|no[ \t]+(?:caps|capitals|spaces?)|(?:all[ \t]+)?one[ \t]+word|no[ \t]+space[ \t]+between)\b)"
)


def _written_value(text: str, pos: int) -> Span | None:
    m = _WRITTEN_RE.match(text, pos)
    if m is None:
        return None
    words = m.group().split()
    if words[0] in _PHRASE_STOP or words[0] in _DESCRIBING or words[0] in _PHRASE_START_STOP:
        return None  # `the password is the same, all lowercase`: a description
    if len(words) == 2:
        return None  # `is case sensitive, all lowercase`
    return m.span()


_HYPHEN_WORDS_RE = re.compile(r"[^\W\d_]{2,}(?:-[^\W\d_]+){2,7}")
_NOT_JOINED_FIRST = frozenset(_words("up one all case well self never out in of over under non"))


def _prose_value(text: str, pos: int, kind: str, bare_link: bool = False) -> Span | None:
    """The value at pos for a keyword of this kind (see `_keyword_kind`)."""
    strong = kind != "weak"
    q = _PROSE_QUOTED_RE.match(text, pos)
    if q is not None and (not bare_link or kind == "strong"):
        value = q.group(2)  # bare: `and password "0psCenter!7"`
        ok = (strong and kind != "loose" and not bare_link) or _credential_like(value, strong)
        if not ok and bare_link and _QUOTED_WORD_RE.fullmatch(value) and text[pos - 2].isalpha():
            line = text.rfind("\n", 0, pos) + 1
            ok = not (
                value in _DESCRIBING
                or value.endswith(_DESCRIBING_ENDS)
                or _CODE_LINE_RE.search(text, line, q.end())
            )
        if any(c.isalnum() for c in value) and not _is_placeholder(value) and ok:
            return q.span(2)
        return None
    if kind in ("code", "pin"):
        span = _code_value(text, pos)
        if span is not None or kind == "code":
            return span
    if kind in ("strong", "pin", "loose", "phrase") and not bare_link:
        span = _spelled_value(text, pos) or _joined_value(text, pos) or _written_value(text, pos)
        if span is not None:
            return span
    if kind == "phrase" and not bare_link:
        verb = text[pos - 1 : pos] in " \t" and ":" not in text[max(0, pos - 3) : pos]
        span = _phrase_value(text, pos, verb)
        if span is not None:
            return span
    b = _PROSE_BARE_RE.match(text, pos)
    if b is None:
        return None
    start, end = b.span()
    end = _trim(text, start, end)
    value = text[start:end]
    if text[end : end + 1] in ("(", "["):
        return None  # a call or a subscript: `puk = rsa_public_key(…)`
    if bare_link:
        # "password espresso4life" without a verb; with a keyword that is also a verb or a
        # word ("we pass nact-2"), only a value that could be nothing but a password
        if kind == "strong" and value.isdigit() and 4 <= len(value) <= 12:
            # `Kapı şifresi 1919, yedek anahtar …`: a number ending the clause
            ok = text[end : end + 1] in ("", *".,;!)\r\n")
            return (start, end) if ok and not _YEAR_RE.fullmatch(value) else None
        if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
            return None
        if len(value) < 6 or (kind == "loose" and not _password_like(value)):
            return None
    return (start, end) if _credential_like(value, strong) else None


# One plain word that ends the statement after a password keyword and its link: `the
# password is swordfish`, `My password is Winter` (the first of two appends). A word that
# says what the password is like, not what it is, is no value: `the password is required`,
# `… is incorrect.`, `… is mine`.
_WORD_END = (
    r"[ \t]+(?:lol|lmao|lmfao|haha|hahaha|hehe|smh|rofl)\b"  # a laugh ends the clause
    # or what is asked of the reader: `… is kitchenrota and please stop changing it`
    r"|[ \t]+(?:and|but|so)[ \t]+(?:please|pls|plz|don't|dont|do[ \t]+not|never|stop"
    r"|remember|keep|tell)\b"
    r"|(?:[ \t]+(?:btw|lol|ok|thx|thanks|haha|xx|x))?"
    r"[ \t]*(?:[.!]?[ \t]*(?:\r?\n|\Z)|[.!;][ \t]+[A-Z]|,[ \t]"
    # how it is written: `moonwalk all lowercase`, `rosegarden all in small letters`
    r"|[ \t]+(?i:all[ \t]+(?:lower|small|in[ \t]+(?:lower|small))|in[ \t]+(?:lower|small)"
    r"|lower[ -]?case|no[ \t]+spaces?|one[ \t]+word|with[ \t]+(?:a|an|the)[ \t]+capital"
    r"|\((?:lower|all|one|case|no)\b))"
)
_WORD_VALUE_RE = re.compile(rf"[A-Za-z][a-z]{{3,23}}(?={_WORD_END})")
_WORD_END_RE = re.compile(_WORD_END)
_DESCRIBING = frozenset(
    _words("""
    wrong right correct incorrect invalid valid required optional mandatory empty blank none
    null missing unset same different weak strong long short simple easy hard complex secure
    insecure safe unsafe fine good bad okay great terrible awful horrible stupid dumb silly
    obvious unique random private public secret hidden visible known unknown lost gone stolen
    temporary permanent default there here mine yours ours theirs hers what which this that
    case ready done enough fake real somewhere elsewhere below above inside pending obsolete
    useless impossible possible weird strange odd same new old also still now too wrong
    there nothing something everything anything ancient terrible garbage trash rubbish
    """)
)
_DESCRIBING_ENDS = (
    "ed", "able", "ible", "ing", "ive", "ful", "less", "ous", "ent", "ant", "ical", "ary",
    "ly", "est", "er", "ic",
)  # fmt: skip
# The words above are English: a plain word is a value only after an English keyword and
# link (`Das Passwort ist falsch`, `La contraseña es obligatoria` describe it).
_ENGLISH_KW = frozenset(
    (
        *_words("password passwd passw0rd p@ssword p@ssw0rd p4ssword pword pswd pwd pw"),
        *_words("passphrase pasword passwrod passowrd"),
        "memorable word",
    )
)
_ENGLISH_LINK_RE = re.compile(
    r"(?:,?[ \t]*which)?[ \t]*(?:(?:'s|’s|is|was)\b[^:]*|:|\?[^:]*)?[ \t]*", re.I
)


# What a bare `pass` is the password of, just before it: `wifi pass is bananabread`, `the
# netflix pass was …` (not `the mountain pass is Stelvio`, `my bus pass is Oyster`).
_PASS_OWNER_RE = re.compile(
    r"(?:wi-?fi|router|login|account|admin|user|e?mail|computer|laptop|phone|ipad|tablet|pc"
    r"|netflix|hulu|disney\+?|spotify|server|vpn|network|guest)[ \t]+\Z"
    r"|\b(?:user(?:name)?|login)\b[^\n]{0,40}[,;][ \t]*\Z",  # `user is lab, pass is beaker`
    re.I,
)


def _owned_pass(m: re.Match[str], link: str) -> bool:
    if m.group().lower() != "pass" or not re.fullmatch(r"[ \t]+(?:is|was)[ \t]+", link, re.I):
        return False
    return bool(_PASS_OWNER_RE.search(m.string, max(0, m.start() - 60), m.start()))


def _english(m: re.Match[str], link: str) -> bool:
    """An English keyword and link, not a parameter of code (`def f(self, pw: Split)`)."""
    before = m.string[max(0, m.start() - 2) : m.start()].rstrip()
    if before.endswith(("(", ",", "[", "{")):
        return False
    return m.group().lower() in _ENGLISH_KW and bool(_ENGLISH_LINK_RE.fullmatch(link))


# A password read out: a word and digits said as words (`bluejay seven seven all
# lowercase`, `lantern dash nine two`), ending the statement or saying how it is written.
_SPOKEN_WORD_RE = re.compile(
    rf"[A-Za-z][a-z]{{2,23}}(?:[ \t]+(?:dash|hyphen|underscore|dot|hash|at))?"
    rf"(?:[ \t]+(?i:{_SPOKEN_DIGIT})){{2,8}}(?![\w-])"
)


def _word_value(text: str, pos: int) -> Span | None:
    spoken = _SPOKEN_WORD_RE.match(text, pos)
    if spoken is not None:
        word = spoken.group().split()[0].lower()
        if (
            _WORD_END_RE.match(text, spoken.end())
            and word not in _DESCRIBING
            and word not in _PHRASE_STOP
            and not word.endswith(_DESCRIBING_ENDS)
            and not re.fullmatch(_DIGIT_WORDS, word)
        ):
            return spoken.span()
    m = _WORD_VALUE_RE.match(text, pos)
    if m is None:
        return None
    word = m.group()
    low = word.lower()
    if low in _DESCRIBING or low in _NOT_ANSWERS or _is_placeholder(word):
        return None
    if low.endswith(_DESCRIBING_ENDS) and word[0].islower():
        return None  # `expired`, `case-sensitive`; a capital: a name (`Winter`, `Butterfly`)
    return m.span()


_NUMBERED_SEED_RE = re.compile(
    r"[ \t]*\r?\n?[ \t]*1[.)][ \t]*[a-z]{3,8}"
    r"(?:[ \t]*\r?\n?[ \t]*\d{1,2}[.)][ \t]*[a-z]{3,8}){11,23}\b"
)


def _seed_value(text: str, pos: int) -> Span | None:
    numbered = _NUMBERED_SEED_RE.match(text, pos)
    if numbered is not None:
        start = numbered.start() + len(numbered.group()) - len(numbered.group().lstrip())
        return start, numbered.end()
    m = _SEED_WORDS_RE.match(text, pos)
    return m.span() if m is not None else None


# Keywords that are also common words (`pass` the verb, `clave`, `parola`): their value
# must look like a password even when quoted, and a verb before them makes them one.
_LOOSE_WORDS = frozenset(("pass", "clave", "parola", "contra"))
_VERB_BEFORE = frozenset(
    _words("""
    to we i you they he she it then and or can could will would must should just also not
    please don't doesn't didn't won't let lets let's that which who may might shall
    """)
)


def _keyword_kind(m: re.Match[str]) -> str:
    """'strong', 'loose', 'phrase', 'pin' (a code or a password), 'code' (a code only),
    'seed', 'weak', or '' when the keyword is not one here."""
    if m.group("seed") is not None:
        return "seed"
    if m.group("code") is not None:
        return "code"
    if m.group("weak") is not None:
        if m.group("weak").lower() == "key":
            # a wifi's or a router's key, named on its line or the line before (`did you
            # change the router?⏎yeah new key's …`)
            line_start = m.string.rfind("\n", 0, m.start()) + 1
            if _WIFI_RE.search(m.string, line_start, m.start()):
                return "strong"
            lo = m.string.rfind("\n", 0, max(0, line_start - 1)) + 1 if line_start else 0
            return "strong" if _ROUTER_RE.search(m.string, lo, m.start()) else ""
        return "weak"
    kw = m.group("strong").lower()
    if kw in _PHRASE_WORDS:
        return "phrase"
    if kw in _LOOSE_WORDS:
        before = m.string[max(0, m.start() - 16) : m.start()].split()
        if before and before[-1].lower() in _VERB_BEFORE:
            return ""
        return "loose"
    return "pin" if _NUMERIC_KW.fullmatch(kw) else "strong"


_NETWORK_WORDS = frozenset(("wifi", "wi-fi", "wlan"))
_LATER_PASSWORD = _words("password pass pw pwd key passcode passwort wachtwoord contraseña senha")
_LATER_PASSWORD_RE = re.compile(
    rf"[^\n]{{0,60}}?(?:\n[^\n]{{0,20}}?)?(?<![A-Za-z0-9])"
    rf"(?:{_trie((*_LATER_PASSWORD, 'mot de passe'))})(?![A-Za-z0-9])|[^\n]{{0,60}}?[ \t]/[ \t]",
    re.I,
)


def _names_network(text: str, pos: int) -> bool:
    """`the wifi is HomeNet5G and the pass is …`, `WiFi: HomeBase / Hb!…`: what follows a
    plain `wifi` is its name when a password follows on the line; alone, it is the key."""
    return _LATER_PASSWORD_RE.match(text, pos) is not None


_LOCK_WORD_RE = re.compile(r"[ \t]+(?i:lock|combo|combination)\b")
_LOCK_SET_RE = re.compile(r"[ \t]+(?i:(?:is[ \t]+)?set[ \t]+to|is)[ \t]+")


def _lock_alone_value(text: str, pos: int) -> Span | None:
    lock = _LOCK_WORD_RE.match(text, pos)  # `Pool gate lock: 5-2-7`
    at = lock.end() if lock is not None else pos
    link = _COLON_LINK_RE.match(text, at)
    if link is None or ":" not in link.group():
        link = _LOCK_SET_RE.match(text, at)  # `Hotel safe set to 280691`, `door is 1590,`
    if link is None:
        return None
    span = _code_value(text, link.end())
    if span is None:
        return None
    if text[span[1] : span[1] + 2].strip()[:1] not in ("", *".,;!()—–\r\n"):
        # the code ends the clause, or an aside follows: `5-2-7 (dial it right)`; a code
        # keyed digit by digit may go on to what to do (`the alarm is 1-9-8-4 and you have
        # 30 seconds`), a time (`alarm: 0630 and then …`) not
        keyed = not text[span[0] : span[1]].isdigit()
        if not (keyed and _AND_THEN_RE.match(text, span[1])):
            return None
    return span


_AND_THEN_RE = re.compile(r"[ \t]+(?:and|then)\b", re.I)


_SEED_ASIDE_RE = re.compile(r",[ \t]+[^,:\n]{1,30}(?=:)")
_DOWN_RE = re.compile(r"[ \t]+(?:down|below|here)(?=[ \t]*:)", re.I)
_BRACKETED_RE = re.compile(r"[ \t]*\(([^()\s]{6,64})\)")
_BRACKETED_CODE_RE = re.compile(
    r"[ \t]*\(((?:\d{1,4}(?:[-–]\d{1,4}){1,5}|[#*]?[A-Z]?\d{3,12})[#*]?)\)"
)


_ENDING_RE = re.compile(r"\b(?:ending|ends|last)(?:[ \t]+(?:in|with))?\Z", re.I)


def _prose_span(m: re.Match[str]) -> Span | None:
    text = m.string
    if m.start() > 0 and (text[m.start() - 1].isalnum() or text[m.start() - 1] in "_."):
        return None  # bypass, spin, OLDPWD, key_password: the keyword inside a longer name
    kind = _keyword_kind(m)
    if not kind or (m.group().lower() in _NETWORK_WORDS and _names_network(text, m.end())):
        return None
    if text[m.start() - 2 : m.start()] in (", ", "; "):
        entry = _ENTRY_WORD_RE.match(text, m.start())
        if entry is not None and (span := _entry_word_span(entry)) is not None:
            return span
    if m.group().lower() in _LOCK_ALONE:
        return _lock_alone_value(text, m.end())
    if m.group().lower() == "combo" and not _LOCK_NOUN_RE.search(
        text, max(0, m.start() - 40), m.end() + 40
    ):
        return None  # `my combo is 4-3-2 then dash`: a game's, not a lock's
    plain_code = kind == "code" and m.group().lower() in _PLAIN_CODES
    if plain_code:
        behind = text[max(0, m.start() - 24) : m.start()]
        before = behind.split()
        if before and before[-1].lower().strip(".,:;") in _NOT_SECRET_CODES:
            return None
        # what the code is for, said first: `Office alarm: code 7720`
        plain_code = not (
            _LOCK_NOUN_RE.search(behind[behind.rfind("\n") + 1 :]) or _OTP_BEFORE_RE.search(behind)
        )
    pos = m.end()
    if kind in ("code", "pin") and not plain_code:
        bracketed = _BRACKETED_CODE_RE.match(text, pos)
        if bracketed is not None:
            return bracketed.span(1)
    elif kind == "strong":
        bracketed = _BRACKETED_RE.match(text, pos)
        if bracketed is not None and _password_like(bracketed.group(1)):
            return bracketed.span(1)
    aside = _ASIDE_RE.match(text, pos) or (
        (_DOWN_RE.match(text, pos) or _SEED_ASIDE_RE.match(text, pos)) if kind == "seed" else None
    )
    if aside is not None:
        pos = aside.end()
    ends = [] if plain_code else [pos]
    qual = _QUALIFIER_RE.match(text, pos)
    if qual is not None:
        at = qual.end()
        for _ in range(6):
            w = _WORD_RE.match(text, at)
            if w is None and text[at - 1] in "'’":  # `il codice dell'armadietto`
                w = _GLUED_WORD_RE.match(text, at)
            if w is None:
                break
            at = w.end()
            if not plain_code or _LOCK_NOUN_RE.search(text, qual.end(), at):
                ends.append(at)
    for i, at in enumerate(ends):
        for link_re in (_LINK_RE, _COLON_LINK_RE, _QA_LINK_RE):
            link = link_re.match(text, at)
            if link is not None:
                span = _value(text, link.end(), kind)
                if span is None and kind == "strong" and _english(m, link.group()):
                    span = _word_value(text, link.end())
                if span is None and kind == "loose" and _owned_pass(m, link.group()):
                    span = _word_value(text, link.end())
                if span is not None:
                    return span
        if i > 0 and kind == "strong":
            link = _BARE_LINK_RE.match(text, at)
            span = _password_at(text, link.end()) if link is not None else None
            if span is not None:
                return span
        if i > 0 and kind in ("pin", "code"):
            # "passcode for the phone 1379": a bare code after what it is for, ending the
            # clause (not "the PIN for the 2024 card is mailed")
            link = _BARE_LINK_RE.match(text, at)
            span = _code_value(text, link.end()) if link is not None else None
            if span is not None and _ENDING_RE.search(text, max(0, at - 16), at):
                continue  # "a code to your phone ending 6621": the end of a number
            spoken = span is not None and text[span[0]].isalpha()  # `eight oh three six`
            if span is not None and (spoken or text[span[1] : span[1] + 1] in ("", *".,;!?)\r\n")):
                return span
        if i == 0 and kind not in ("weak", "loose"):
            link = _TO_RE.match(text, at)  # "changed the root password to …"
            if link is not None and (span := _value(text, link.end(), kind)) is not None:
                return span
    if kind == "seed":  # `Metamask secret recovery phrase gadget hint evolve …`
        words = _SEED_WORDS_RE.match(text, pos + 1) if text[pos : pos + 1] in " \t" else None
        if words is not None and len(words.group().split()) in (12, 15, 18, 21, 24):
            return words.span()
    if kind in ("strong", "loose", "phrase", "pin", "code") and not plain_code:
        link = _BARE_LINK_RE.match(text, pos)
        if link is not None:
            k = kind if kind in ("pin", "code", "loose") else "strong"
            span = _prose_value(text, link.end(), k, bare_link=True)
            if span is not None:
                return span
        if kind in ("strong", "pin", "phrase"):
            span = _after_words_value(text, pos, kind)
            if span is not None:
                return span
        span = _gap_value(text, pos, kind)
        if span is not None:
            return span
        if kind in ("strong", "loose", "phrase"):
            return _late_value(text, pos)
    if kind in ("pin", "code") and not plain_code:
        return _late_code(text, pos)
    return None


# A code after words that say what it is: `PIN? same as my bike lock, 3141`, `the key box
# is my birthday, 0412`, `the combination's my birthday 1 7 0 6`.
_LATE_CODE_RE = re.compile(
    r"(?:[ \t]+(?:is|was)|[ \t]*\?|'s|’s)[ \t]+[^\n.?!:;,→]{1,60}?"
    r"(?:[ \t]*[:,→][ \t]*|[ \t](?=\d(?:[ ]\d){3}))",
    re.I,
)


def _late_code(text: str, pos: int) -> Span | None:
    late = _LATE_CODE_RE.match(text, pos)
    if late is None:
        return None
    span = _code_value(text, late.end())
    if (
        span is None
        or not _SENTENCE_END_RE.match(text, span[1])
        and text[span[1] : span[1] + 1] != ","
    ):
        return None
    if _YEAR_RE.fullmatch(text, *span) and re.search(
        r"\b(?:in|since|from|of)[ \t]*\Z", late.group()
    ):
        return None
    return span


# A few words between a keyword and its verb (`the password they gave me at work is
# Welcome123!`, `the password my manager set is Tq7-river-22`): the value then needs a
# digit or a symbol, the words alone say little.
_GAP_VERBS = r"is|was|adalah|ialah|este|és|est|ist|es|é|è|je|jest|er|är|yra|είναι"
_GAP_LINK_RE = re.compile(
    rf"(?:[ \t]+(?!(?:are|were|{_GAP_VERBS})\b)[^\W\d_][\w'’-]{{0,20}}){{1,5}}"
    rf"[ \t]+(?:{_GAP_VERBS})[ \t]+",
    re.I,
)


def _gap_value(text: str, pos: int, kind: str) -> Span | None:
    gap = _GAP_LINK_RE.match(text, pos)
    if gap is None or kind in ("phrase", "seed"):
        return None
    if gap.group().split()[0].lower() in _NOT_A_HOLDER:
        return None  # `the password manager we use is 1Password`: no password's value
    span = _prose_value(text, gap.end(), kind)
    if span is None:
        return None
    value = text[span[0] : span[1]]
    core = value.strip("*_`'\".,!?")  # not markup's `available**`
    if not any(c.isdigit() or c in _SYMBOLS for c in core) or _YEAR_RE.fullmatch(value):
        return None
    return span


# One to three words between a keyword and its value, with no verb or preposition:
# `passcode iphone 482019`, `PIN ATM bapak 204617`, `kata sandi wifi kantor: KopiSusu88`,
# `contraseña provisional Bienvenida#2024`.
# Words after a keyword that name a thing about it, not what it opens.
_NOT_A_HOLDER = frozenset(
    _words("""pad pads model type length size format policy policies reset entry screen prompt
    field rules requirements settings change manager hint strength link page expiry expires
    label generator protected protection recovery rotation complexity check""")
)
_YEAR_RE = re.compile(r"(?:19|20)\d\d")
_AFTER_WORD_RE = re.compile(r"[ \t]+([^\W\d_][\w'’-]{0,24})")


def _after_words_value(text: str, pos: int, kind: str) -> Span | None:
    at = pos
    for _ in range(3):
        w = _AFTER_WORD_RE.match(text, at)
        if w is None:
            return None
        word = w.group(1).lower()
        if word in _PHRASE_STOP or word in _CLAUSE_WORDS or word in _PHRASE_START_STOP:
            return None  # `the PIN is …`, `password for …`: a sentence, not a label
        if word in _NOT_A_HOLDER:
            return None  # `PIN pad model: X200`, `password manager: 1Password`
        at = w.end()
        colon = _COLON_LINK_RE.match(text, at)
        if colon is not None and (":" in colon.group() or "→" in colon.group()):
            return _prose_value(text, colon.end(), "strong" if kind == "phrase" else kind)
        blank = _BARE_LINK_RE.match(text, at)
        if blank is None:
            return None
        if kind == "pin":
            span = _code_value(text, blank.end())
            if span is not None and (
                text[span[1] : span[1] + 1] in ("", *".,;!)\r\n")
                or not _YEAR_RE.fullmatch(text, *span)
            ):
                return span  # `PIN ATM bapak 204617 jangan …`, not `PIN pad 2000 series`
            continue
        span = _password_at(text, blank.end())
        if span is not None:
            return span
    return None


def _value(text: str, pos: int, kind: str) -> Span | None:
    if kind == "seed":
        return _seed_value(text, pos + (text[pos : pos + 1] in "\"'“‘"))
    return _prose_value(text, pos, kind)


def _late_value(text: str, pos: int) -> Span | None:
    late = _LATE_COLON_RE.match(text, pos)
    if late is None:
        return None
    if _WORDS_SAID_RE.search(late.group()) and late.group().rstrip().endswith(":"):
        # `master password is four random words: tractor biscuit lagoon velvet`
        span = _phrase_value(text, late.end(), False)
        if span is not None:
            return span
    b = _PROSE_BARE_RE.match(text, late.end())
    if b is None:
        return None
    end = _trim(text, b.start(), b.end())
    value = text[b.start() : end]
    long_number = value.isdigit() and 6 <= len(value) <= 12  # `my birthday backwards, 91870319`
    mixed = value.isalnum() and not value.isdigit() and not value.isalpha() and len(value) >= 8
    if (_password_like(value) or long_number or mixed) and _SENTENCE_END_RE.match(text, end):
        return b.start(), end
    return None


# A plain word after a password keyword with no link, where the keyword opens the last
# entry of a list after a comma (`Guest wifi: Robinsons_Guest, password welcomefriends`,
# `…, passcode Bowline#2024, memorable word halyard.`): the entry is the keyword and its
# value, and the word ends it. Not a word that says what the password is like or names
# something about passwords (`…, password reset.`, `…, password protected`). Tried by
# `_prose_span` where a keyword follows `, ` or `; `.
_ENTRY_KW = _words("password passwd passcode pwd pw pass key")
_ENTRY_WORD_RE = re.compile(
    rf"(?<=[,;] )(?P<kw>(?i:{_trie((*_ENTRY_KW, 'memorable word'))}))[ \t]+"
    r"(?P<s>[A-Za-z][a-z]{3,23}|[A-Z]{4,24}|[a-z]{2,}(?:-[a-z]+){2,7})"
    r"(?=[ \t]*(?:[.;!]?[ \t]*(?:\r?\n|\Z)|[.;!][ \t]+[A-Z]|,[ \t]))"
)
_ENTRY_NOT_WORDS = _NOT_A_HOLDER | frozenset(
    _words("""hash hashes hashing salt salted auth authentication login logins box input file
    files store storage vault fields reminder history changes expiration lockout attempts
    only please again twice here there etc form forms dialog usage update updates support
    protect management handling reuse sharing sync encryption""")
)


# what the entries before a bare `pass` or `key` name: a login or a network
_ENTRY_OWNER_RE = re.compile(
    r"(?:wi-?fi|ssid|network|user(?:name)?|login|name|lobby|server|account)\b", re.I
)


def _entry_word_span(m: re.Match[str]) -> Span | None:
    text, word = m.string, m.group("s")
    low = word.lower()
    if m.group("kw").lower() in ("pass", "key") and not _ENTRY_OWNER_RE.search(
        text, text.rfind("\n", 0, m.start()) + 1, m.start()
    ):
        return None  # `…, pass rate`, `…, key points`: no login named before
    if low in _ENTRY_NOT_WORDS or low in _DESCRIBING or low in _NOT_ANSWERS:
        return None
    if _is_placeholder(word) or _PROSE_KW_RE.fullmatch(word):
        return None
    if low.endswith(_DESCRIBING_ENDS) and word[0].islower():
        return None  # `…, password expired`, `…, pw optional`
    line = text.rfind("\n", 0, m.start()) + 1
    if _CODE_LINE_RE.search(text, line, m.end()):
        return None
    return m.span("s")


_USE_AS_RE = re.compile(
    r"(?i:use|used|using|try|tried|set|chose|chosen|picked|put)[ \t]+"
    r"(?P<q>[\"'`]?)(?P<s>[^\s\"'`]{4,64})(?P=q)[ \t]+"
    r"(?i:as)[ \t]+(?:(?i:the|my|our|your|a|an|his|her|their)[ \t]+)?(?:[\w-]+[ \t]+)?"
    rf"(?i:{_trie(_STRONG_WORDS)})(?![A-Za-z0-9])"
)


# A password corrected in the same breath: "paypal password Tr0ub — no wait, it's
# Tr0ub4dor&9", "the wifi key is Bl… sorry, it's BlueFox#41". The keyword is on the line
# a little before the correction.
_CORRECTION_WORDS = _words("wait sorry oops correction actually mean bad changed")
_CORRECTION_RE = re.compile(
    rf"(?:(?i:{'|'.join(_CORRECTION_WORDS)})"
    r"(?:[ \t]+[a-z]{2,14})?[ \t]*[,:;.!—–-]*[ \t]+"
    r"(?i:it'?s|it’s|it[ \t]+is|that'?s|should[ \t]+be)"
    r"|(?i:(?:the[ \t]+)?new[ \t]+one(?:[ \t]+is|'s|’s)))[ \t]*:?[ \t]*"
    r"(?P<s>[^\s\"'`<>()\[\]{}]{4,64})"
)


def _correction_span(m: re.Match[str]) -> Span | None:
    text = m.string
    if m.start() > 0 and text[m.start() - 1].isalnum():
        return None
    start = m.start("s")
    end = _trim(text, start, m.end("s"))
    value = text[start:end]
    if _password_like(value) and any(c in _SYMBOLS for c in value):
        return start, end  # `sorry wrong one, actually it's Pickles#45`
    if not _credential_like(value, True):
        return None
    code = _CODE_VALUE_RE.fullmatch(value) is not None
    # the keyword said a little before, on this line or the one above
    for k in _PROSE_KW_RE.finditer(text, max(0, m.start() - 120), m.start()):
        kind = _keyword_kind(k)
        if kind in ("strong", "pin") or (kind == "code" and code):
            return start, end
    return None


# Recovery and backup codes, one or a list: "recovery codes for google: 8821-4403
# 1176-9932", "FileVault recovery key: QW4R-T7YU-…", "2FA backup codes:⏎39482017⏎…".
_RECOVERY_RE = re.compile(
    r"(?i:recovery|backup|2fa|mfa|two-factor|2-step|emergency|scratch|one-time|host)[ \t-]+"
    r"(?i:codes?|keys?)(?![\w])"
    # `key Apple gave me is …`, `codes for github:`, `key from the setup email: …`
    r"(?:(?:(?:[ \t]+[\w.@'’-]{1,40}){1,6}?(?=[ \t]+(?i:is|are|was|were)\b|[ \t]*:))?"
    r"(?:[ \t]*\([^()\n]{1,30}\))?"  # `(printed 2/3)`
    r"(?:,[ \t]+[^:\n]{1,40}(?=:))?"  # `codes, keep them somewhere safe: …`
    r"(?:[ \t]*\)?[ \t]*(?::|=|->)|[ \t]*\(|[ \t]+(?i:is|are|was|were)(?:[ \t]*:)?)"
    r"(?:[ \t]*(?i:currently|now)\b)?"
    # or a code straight after the words or on the next line, taken only when
    # `_recovery_span` finds one
    r"|(?=[ \t]|\r?\n))"
)
_RECOVERY_CODE_RE = re.compile(
    r"[ \t]*(?:\r?\n[ \t]*(?:[-*•][ \t]+|\d{1,2}[.)][ \t]+)?)?"
    # (or a key in one piece, in capitals and digits: a 2FA app's secret `K4RTQ7MZ2XWPLN5B`)
    r"([A-Z0-9]{12,40}(?![\w-])|[A-Za-z0-9]{3,8}(?:[- ](?!and\b)[A-Za-z0-9]{3,8}){0,7})"
    r"[ \t]*(?:[,;)]|(?i:and)(?=[ \t]))?"
)


def _recovery_span(m: re.Match[str]) -> Span | None:
    text = m.string
    if m.start() > 0 and text[m.start() - 1].isalnum():
        return None
    first = last = -1
    pos = m.end()
    for _ in range(32):
        c = _RECOVERY_CODE_RE.match(text, pos)
        if c is None or _glued(text, c.end(1)):
            break
        code = c.group(1)
        if not any(ch.isdigit() for ch in code) or len(code.replace("-", "")) < 5:
            break
        if " " in code and not all(any(ch.isdigit() for ch in w) for w in code.split()):
            break  # `R7KQ2 and then …`: one code, then words
        first = c.start(1) if first < 0 else first
        last = c.end(1)
        pos = c.end()
    return (first, last) if first >= 0 else None


_BITLOCKER_RE = re.compile(r"(?<![\w-])\d{6}(?:-\d{6}){7}(?![\w-])")

# A product or recovery key's shape: three to eight groups of four or five capitals and
# digits joined by dashes, each group with a digit, and letters no hex digit is
# (`X7K9-MP2Q-44RT`, `R7KQ-2MXP-9WTD-4HLC-8NVB-3JFY`), with or without a keyword. Not a
# hex id (`1A2B-3C4D-5E6F`), a date, or groups of letters (`ISO-8859-1`, `AES-256-GCM`).
# Looked for from its first dash: `re` scans for a literal fast.
_GROUPED_KEY_RE = re.compile(r"-(?<=[A-Z0-9]{4}-)[A-Z0-9]{4,5}(?:-[A-Z0-9]{4,5}){1,6}(?![\w-])")


def _grouped_key_span(m: re.Match[str]) -> Span | None:
    text = m.string
    start = m.start()
    while (
        start > 0
        and start > m.start() - 5
        and (text[start - 1].isupper() or text[start - 1].isdigit())
    ):
        start -= 1
    if m.start() - start < 4 or (
        start and (text[start - 1].isalnum() or text[start - 1] in "_-./")
    ):
        return None
    groups = text[start : m.end()].split("-")
    if not all(any(c.isdigit() for c in g) for g in groups):
        return None
    if not any(c in "GHIJKLMNOPQRSTUVWXYZ" for c in text[start : m.end()]):
        return None  # hex: an id
    return start, m.end()


# A markdown table with a password column: each row's cell in that column.
# `| Service | User | Password |⏎| --- | --- | --- |⏎| Grafana | admin | gr4fana!Dash |`
_TABLE_ROW_RE = re.compile(r"^[ \t]*\|([^\n]*)\|[ \t]*$", re.M)
_TABLE_RULE_RE = re.compile(r"[ \t]*\|?(?:[ \t]*:?-{3,}:?[ \t]*\|)+[ \t]*(?::?-{3,}:?[ \t]*)?")
_CELL_EMPHASIS = " \t*_`"


def _cells(row: str) -> list[tuple[int, int]]:
    """The spans of a row's cells (inside its outer pipes), emphasis and blanks trimmed."""
    out, at = [], 0
    for cell in row.split("|"):
        lo, hi = at, at + len(cell)
        while lo < hi and row[lo] in _CELL_EMPHASIS:
            lo += 1
        while hi > lo and row[hi - 1] in _CELL_EMPHASIS:
            hi -= 1
        out.append((lo, hi))
        at += len(cell) + 1
    return out


def _secret_column(header: str) -> tuple[int, str] | None:
    """The first column whose header is a password, PIN or code keyword, and its kind."""
    for i, (lo, hi) in enumerate(_cells(header)):
        k = _PROSE_KW_RE.fullmatch(header, lo, hi)
        if k is not None and k.group("weak") is None:
            kind = _keyword_kind(k)
            if kind in ("strong", "phrase", "pin", "code"):
                return i, kind
            if kind == "loose":  # a header `pass` is a column of passwords
                return i, "strong"
    return None


# The tables of the last text scanned, found once for all its rows (a table of 5,000 rows
# is one pass, not 5,000 walks back to its rule). One entry, replaced whole: threads that
# redact other texts at once only miss it.
_LAST_TABLES: list[tuple[str, list[tuple[int, int, int, str]]] | None] = [None]
_TABLE_RULE_LINE_RE = re.compile(rf"^{_TABLE_RULE_RE.pattern}$", re.M)


def _tables(text: str) -> list[tuple[int, int, int, str]]:
    """(first row, end of the last row, column, kind) of each markdown table of text
    whose header names a password, PIN or code column."""
    last = _LAST_TABLES[0]
    if last is not None and last[0] is text:
        return last[1]
    out = []
    for rule in _TABLE_RULE_LINE_RE.finditer(text):
        head_end = rule.start() - 1
        if head_end <= 0:
            continue
        header = _TABLE_ROW_RE.fullmatch(text, text.rfind("\n", 0, head_end) + 1, head_end)
        column = _secret_column(header.group(1)) if header is not None else None
        if column is None:
            continue
        first = pos = rule.end() + 1
        while pos < len(text):
            nl = text.find("\n", pos)
            line_end = len(text) if nl < 0 else nl
            if not text[pos:line_end].lstrip().startswith("|"):
                break
            pos = line_end + 1
        out.append((first, pos, *column))
    out += _ruleless_tables(text, out)
    _LAST_TABLES[0] = (text, out)
    return out


# A table of pipes with no rule under its header (`| Room | Device | Code |⏎| Kitchen |
# Alarm panel | 5151 |`): the header is the first row of a block of rows of as many cells;
# a plain code's column only where a lock is named in the rows.
def _ruleless_tables(
    text: str, ruled: list[tuple[int, int, int, str]]
) -> list[tuple[int, int, int, str]]:
    out: list[tuple[int, int, int, str]] = []
    pos = 0
    while True:
        head = _TABLE_ROW_RE.search(text, pos)
        if head is None:
            return out
        pos = head.end() + 1
        if head.start() > 0:
            above = text[text.rfind("\n", 0, head.start() - 1) + 1 : head.start() - 1].strip()
            if above.startswith("|") and above.endswith("|"):
                continue  # not the first row of its block
        if any(t[0] <= pos < t[1] for t in ruled) or _TABLE_RULE_LINE_RE.match(text, pos):
            continue
        column = _secret_column(head.group(1))
        if column is None:
            continue
        width = len(_cells(head.group(1)))
        end = pos
        while True:
            row = _TABLE_ROW_RE.match(text, end)
            if row is None or len(_cells(row.group(1))) != width:
                break
            end = row.end() + 1
        if end == pos:
            continue
        if column[1] == "code" and not _LOCK_NOUN_RE.search(text, pos, end):
            continue
        out.append((pos, end, *column))
        pos = end


def _table_span(m: re.Match[str]) -> Span | None:
    table = next((t for t in _tables(m.string) if t[0] <= m.start() < t[1]), None)
    if table is None:
        return None
    index, kind = table[2], table[3]
    cells = _cells(m.group(1))
    if index >= len(cells):
        return None
    lo, hi = cells[index]
    value = m.group(1)[lo:hi]
    base = m.start(1)
    if kind in ("pin", "code"):
        ok = _CODE_VALUE_RE.fullmatch(value) is not None or _password_like(value)
    elif kind == "phrase":
        ok = len(value.split()) >= 3 and not _is_placeholder(value)
    else:
        ok = bool(value) and " " not in value and not _is_placeholder(value) and value != "-"
    return (base + lo, base + hi) if ok else None


# A reply on the next line to a line that asks for a password, after the speaker's name:
# "Assistant: I need the sudo password to install the package.⏎User: it's hunter2hunter2",
# "agent: please provide the passphrase for the deploy key⏎user: blue kettle sings at dawn".
_REPLY_RE = re.compile(
    r"\n[ \t]*(?:>[ \t]*)?[A-Za-z][\w.'’ -]{0,20}:[ \t]*"
    r"(?:(?i:ok(?:ay)?|sure|yes|yeah|yep|sorry)[ \t]*,?[ \t]+)?"
    r"(?:(?i:it'?s|its|it’s|it[ \t]+is|that'?s)[ \t]*:?[ \t]+)?"
    r"(?P<s>[^\s\"'`<>()\[\]{}][^\n]{0,127})"
)


def _reply_span(m: re.Match[str]) -> Span | None:
    text = m.string
    asked = text[text.rfind("\n", 0, m.start()) + 1 : m.start()]
    if "?" not in asked and not _ASK_RE.search(asked):
        return None
    kinds = {_keyword_kind(k) for k in _PROSE_KW_RE.finditer(asked)}
    start = m.start("s")
    if "phrase" in kinds or "seed" in kinds:
        span = _phrase_value(text, start, False) or _seed_value(text, start)
        if span is not None:
            return span
    if not kinds & {"strong", "pin"}:
        return None
    b = _PROSE_BARE_RE.match(text, start)
    if b is None:
        return None
    end = _trim(text, start, b.end())
    value = text[start:end]
    if "pin" in kinds and _CODE_VALUE_RE.fullmatch(value):
        return start, end
    return (start, end) if _credential_like(value, True) else None


_ASK_RE = re.compile(r"(?i:\b(?:need|provide|give|send|enter|type|share|tell|what|which)\b)")


# An answer on the next line to a line that asks for a password or a code, in any chat's
# layout: `whats the pass for the private lobby⏎dragonz⏎thx`, `Welche PIN hat das Tablet
# nochmal?⏎2019, wie immer`, `[10:42] Priya: what's the guest wifi pw?⏎[10:43] Tom:
# BlueDesk#guest`. The asking line ends in a `?` or starts with an asking word and names
# a password, a PIN or a lock's code (not a `password manager`); the answer is the next
# line that is not the asker's, a short one: after a time, a speaker's name, a quote
# mark, a yes or an `it's`, it starts with the value: a code for a PIN or a lock, a word
# shaped like a password, or a plain word alone on its line for a password (`dragonz`,
# not `Yesterday`).
_ASKED_RE = re.compile(
    rf"(?<![A-Za-z0-9_])(?:{_PROSE_KW_RE.pattern}|(?P<sq>security[ \t]+question|maiden[ \t]+name))",
    re.I,
)
_ASKED_SEEK = re.compile(_trie((*_KEYWORDS_ALL, "security question", "maiden name")))
# Where a line asks: its `?` or an asking word, up to the line's end (the keywords are
# looked for on those lines only: a scan for any keyword anywhere costs far more).
_ANSWER_MAX = 64  # an answer is a short line: longer lines after a question are prose
_SHORT_NEXT = rf"(?=(?:[ \t]*\n)?[^\n]{{1,{_ANSWER_MAX}}}(?:\n|\Z))"
_ASK_END_RE = re.compile(rf"\?[^\n?]{{0,24}}\n{_SHORT_NEXT}")
_ASK_WORDS = _words("""what what's whats which wat need send give tell remind remember welche
welcher welches welchen hast quel quelle cual cuál qual jaki jaka jakie""")
# (an asking word first on its line, after a speaker's name and a greeting: a scan from
# line starts, whose groups never backtrack, is cheap)
_ASK_WORD_RES = tuple(
    re.compile(
        rf"{start}[ \t>\"“]*+(?>\[[^\]\n]{{1,24}}+\][ \t]*+)?(?>[A-Z][\w.'’ -]{{0,20}}+:[ \t]*+)?"
        r"(?>(?i:hey|hi|ok|okay|so|and|um|oh|btw|also|sorry)[ \t,.!]++)?"
        rf"(?i:{_trie(_ASK_WORDS)})(?![\w'’])[^\n?]{{0,80}}\n{_SHORT_NEXT}"
    )
    for start in (r"\A", r"\n")
)
# a chat line's lead: a quote mark `>`, a time in brackets (not a marker), then the speaker
_CHAT_LEAD = r"[ \t]*(?:>[ \t]*)?(?:\[(?!REDACTED)[^\]\n]{1,24}\][ \t]*)?"
_SPEAKER = r"[A-Z][\w.'’ -]{0,20}"
_ANSWER_LEAD_RE = re.compile(
    # (a dash opens a line of dialogue in Spanish, French, Russian…: `— 2211, pero…`)
    rf"{_CHAT_LEAD}(?:{_SPEAKER}:[ \t]*)?(?:[—–][ \t]*)?"
    r"(?:(?i:ok(?:ay)?|sure|yes|yeah|yep|ja|oui|s[ií]|sorry|np|hmm+|um+|uh|so)[ \t]*[,.!:]*[ \t]+)?"
    r"(?:(?i:it'?s|its|it’s|it[ \t]+is|that'?s|try|use|es|c'est|c’est|ist)[ \t]*:?[ \t]+)?"
    r"[\"'“‘]?"
)
_SPEAKER_RE = re.compile(rf"{_CHAT_LEAD}({_SPEAKER}):")
# What a plain word answering the question says when it is no password.
_NOT_ANSWERS = frozenset(
    _words("""yesterday today tomorrow later soon never always maybe perhaps nope dunno idk
    nothing thanks thank sorry please wait what why where when which who how same both
    neither either check ask look here there mine yours this that these those none sure
    okay fine yes yeah yep nah right left still again also just only exactly hang hold
    hello hey morning evening night tonight unsure forgot forget changed reset""")
)
_ANSWER_TAIL_RE = re.compile(
    r"[ \t]*[\"'”’]?[ \t]*[.!]*[ \t]*(?:(?i:thx|thanks|lol|xx|x|ok)[ \t]*[.!]*)?[ \t]*"
    r"[^\w\s]{0,4}[ \t]*(?:\n|\Z)"  # an emoji, a full stop
)


def _answer_span(m: re.Match[str]) -> Span | None:
    text = m.string
    line_end = m.end() - 1
    line_start = text.rfind("\n", 0, line_end) + 1
    if _ASKED_SEEK.search(text[line_start:line_end].lower()) is None:
        return None  # no keyword: most lines that ask
    if _CODE_LINE_RE.search(text, line_start, line_end):
        return None
    asked = None
    for k in _ASKED_RE.finditer(text, line_start, line_end):
        # the line's last keyword (`what's the pin for the bike lock?`), a password's
        # before a lock's (`whats the pw for the shed laptop`)
        if asked is None or k.group("code") is None or asked.group("code") is not None:
            asked = k
    if asked is None:
        return None
    after = _AFTER_WORD_RE.match(text, asked.end(), line_end)
    if after is not None and after.group(1).lower().rstrip("s") in _NOT_A_HOLDER:
        return None  # `which password manager do you use?`
    if asked.group("sq") is not None:
        kind = "strong"
    else:
        kind = _keyword_kind(asked)
        if kind == "code" and not _LOCK_NOUN_RE.search(text, line_start, line_end):
            kw = asked.group("code").lower()
            if kw in _PLAIN_CODES or kw == "codes":
                return None  # `what's the error code?`: a lock must be named
        if kind not in ("strong", "loose", "pin", "code", "phrase", "seed"):
            return None
    asker = _SPEAKER_RE.match(text, line_start)
    start = line_end + 1
    for _ in range(2):  # the asker's own next line is not the answer
        while text.startswith("\n", start):
            start += 1
        speaker = _SPEAKER_RE.match(text, start)
        if asker is None or speaker is None or speaker.group(1) != asker.group(1):
            break
        start = text.find("\n", start) + 1
        if start == 0:
            return None
    answer_end = text.find("\n", start)
    answer_end = len(text) if answer_end < 0 else answer_end
    if _CODE_LINE_RE.search(text, start, answer_end) or text[start:answer_end].rstrip().endswith(
        (":", "=", "{", "(", ",")
    ):
        return None  # a line of code or a line that leads on
    lead = _ANSWER_LEAD_RE.match(text, start)
    pos = lead.end() if lead is not None else start
    span = _answer_value(m, text, pos, kind)
    if span is not None or kind in ("phrase", "seed"):
        return span
    # the value told later in the answer, after an `it's` or a colon (`sorry!! it changed on
    # Monday, it's 4826 now`): a code or a password's shape only, not a plain word
    later = _LATER_ITS_RE.search(text, pos, answer_end)
    if later is None:
        return None
    if kind in ("pin", "code"):
        return _answer_code(text, later.end())
    b = _PROSE_BARE_RE.match(text, later.end(), answer_end)
    if b is None:
        return None
    end = _trim(text, later.end(), b.end())
    value = text[later.end() : end]
    if _credential_like(value, True) and not _CRED_NOT_RE.fullmatch(value):
        return later.end(), end
    return None


# `it's`, `it is`, `it's now` inside an answer, after a word (`…, it's 4826 now`), or a
# colon (`its on the sticker: 7HQ4-KP9X-22MR`)
_LATER_ITS_RE = re.compile(
    r"(?<=[\w,;.!)])(?:[ \t]+(?i:it'?s|it’s|it[ \t]+is)(?:[ \t]+now)?[ \t]+|:[ \t]+)"
)


def _answer_code(text: str, pos: int) -> Span | None:
    span = _code_value(text, pos)
    if span is None or _NEAR_UNIT_RE.match(text, span[1]):
        return None
    return span


def _answer_value(m: re.Match[str], text: str, pos: int, kind: str) -> Span | None:
    """The value that starts an answer line at `pos` (see `_answer_span`)."""
    if kind in ("phrase", "seed"):
        span = _phrase_value(text, pos, False) or _seed_value(text, pos)
        if span is None or not _ANSWER_TAIL_RE.match(text, span[1]):
            return None  # a passphrase answers alone on its line
        return span
    if kind in ("pin", "code"):
        return _answer_code(text, pos)
    b = _PROSE_BARE_RE.match(text, pos)
    if b is None:
        return None
    end = _trim(text, pos, b.end())
    while end > pos and text[end - 1] in "\"'”’":
        end -= 1
    value = text[pos:end]
    if not value[:1].isalnum() or value[-1] in "=:":
        return None  # `_string`, `:class`, `mode=`: names in code
    if _credential_like(value, True) and not _CRED_NOT_RE.fullmatch(value):
        return pos, end
    if not (value.isalpha() and len(value) >= 4 and _ANSWER_TAIL_RE.match(text, end)):
        return None
    low = value.lower()
    if low in _NOT_ANSWERS or low in _DESCRIBING or _is_placeholder(value):
        return None
    if low.endswith(_DESCRIBING_ENDS) and value[0].islower() and m.group("sq") is None:
        return None
    return pos, end


# An agent's tool call that types into a password field:
# `browser.fill(selector="#password", value="Vn8$wQ2#hZ")`, `type(field='passwd', text='…')`.
_FILL_RE = re.compile(
    r"(?i:pass(?:word|wd|code|phrase)?|pwd|pin)[\w-]*[\"'\]]*[^\n\"'()]{0,8}[\"']?"
    r"[ \t]*[,;][^\n()]{0,40}?\b(?i:value|text|input|keys)[\"']?[ \t]*[:=][ \t]*"
    r"(?P<q>[\"'])(?P<s>[^\"'\r\n]{1,128})(?P=q)"
)


def _fill_span(m: re.Match[str]) -> Span | None:
    value = m.group("s")
    return m.span("s") if value.strip() and not _is_placeholder(value) else None


# A superset of what `_prose_span` accepts after a keyword, checked while seeking.
_LINK_AHEAD = (
    r"(?=(?:'s|’s)[ \t]|,[ \t]|[ \t]*(?:\*\*|__)?(?::|=|->|\?|\()"
    r"|[ \t]+(?:is|was|are|were|to|set|changed|reset|rotated|switched|rolled"
    r"|updated|has|had|got|for|of|on|at|in|into|with|est|c'est|c’est|ist|lautet|war|es|era|wa"
    r"|will|would|should|shall|as|opens|unlocks|which|from|4"
    r"|é|è|är|er|je|jest|sont|du|de|des|del|della|dello|di|do|da|dos|für|fürs|van|voor|för"
    r"|adalah|ialah|ay|ni|este|és|yra|ir|είναι|е|је|это|है|است|คือ|zijn|sind|son"
    r"|till|til|zu|pour|next|by|near|behind|under|outside|inside|beside|down|below|here|para"
    r"|per|pro|от|для|до|на|від|за|vom|von|beim|zum|zur|na|od|off)(?![\w])"
    r"|[ \t]+(?:dell|dall|nell|sull|d|l)['’]"
    r"|[ \t]+[#*]?[0-9]|[ \t]+[^\s]*[0-9]|[ \t]+[\"“]"
    r"|(?:[ \t]+[^\s:]{1,25}){1,3}(?::|[ \t]+\S*[0-9])"
    r"|[ \t]+(?:again|now|exactly|pls|please|nochmal)[ \t]*\?"
    rf"|(?:[ \t]+[^\s:]{{1,21}}){{1,5}}[ \t]+(?:{_GAP_VERBS})[ \t]+\S*[\d!#$&@%*?]"  # `_gap_value`
    rf"|[ \t]+(?:{_DIGIT_WORDS})[ \t,-]"  # a code read out: `PIN seven zero three three`
    r"|[ \t]+[a-z]{4,24}[ \t]*(?:[.;!]?[ \t]*(?:\n|\Z)|[.;!,][ \t])"  # `_entry_word_span`
    r"|[ \t]+[a-z]{2,}(?:-[a-z]+){2}"
    r"|(?:[ \t]+[a-z]{3,8}){12})"  # a recovery phrase's words
)


def _use_as_span(m: re.Match[str]) -> Span | None:
    if m.start() > 0 and m.string[m.start() - 1].isalnum():
        return None
    return m.span("s") if _credential_like(m.group("s"), True) else None


# Keywords in scripts without spaces between words, and the particle or verb that links
# them to the value: "パスワードは Sakura2024!", "密码是Panda#888", "비밀번호는 …", "门锁密码改成
# 520131", or a blank alone ("와이파이 비번 pcbang0707!!"). Digits are a code from 3 on, and
# a particle may be glued to them ("비밀번호 9146으로 바꿨어": "to 9146").
_CJK_KEYWORDS = tuple(_words("パスワード 暗証番号 暗号 密码 密碼 口令 비밀번호 비번 암호"))
_CJK_UNITS = "|".join(
    (
        "bits?",
        "bytes?",
        *_words("位 桁 자리 文字 字 次 回 個 个 件 人 年 月 日 時 时 分 秒"),
        *_words("円 元 원 개 명 년 월 일 시 분 초 번"),
    )
)
_CJK_RE = re.compile(
    rf"(?:{'|'.join(_CJK_KEYWORDS)})(?:[ \t]*(?:は|是|为|為|는|은|：|:|=|改成|改为|改為|设为|设成"
    r"|設為|設成)[ \t]*(?:：|:)?[ \t]*|[ \t]+)"
    rf"(?:(?P<d>\d{{3,12}})(?![\d.,:/-]?[\dA-Za-z]|[ \t]*(?:{_CJK_UNITS}))"
    r"|(?P<s>[^\s。、，,「」『』\"'`]{1,128}))"
)


def _cjk_span(m: re.Match[str]) -> Span | None:
    if m.group("d") is not None:
        return m.span("d")
    start = m.start("s")
    end = _trim(m.string, start, m.end("s"))
    value = m.string[start:end]
    if value.isdigit():
        return None  # digits the code above did not take: a count, a measure
    return (start, end) if _credential_like(value, True) else None


# A login and its password written as a pair: "credentials are admin/S3cretPass99",
# "Login for the NAS is admin / Nas#Box2019", "creds: root / T0orP@ss". The user name is
# not the secret; the password after the `/` or `:` is.
_PAIR_KW = (
    r"credentials|creds|login|logins|log-in|account|acct|username|user|auth|wi-?fi|wlan|ssid|u/p"
)
_PAIR_RE = re.compile(
    rf"(?i:{_PAIR_KW})(?:[ \t]+(?i:for|to|of|on|at)(?:[ \t]+[\w.@'-]{{1,64}}){{1,3}})?"
    r"(?:[ \t]*[:=][ \t]*|[ \t]+(?i:are|is|were|was)[ \t]*:?[ \t]+)"
    r"(?P<u>[\w.@+-]{1,64})(?:[ \t]*/[ \t]*|:)(?P<s>[^\s\"'`<>()\[\]{}]{1,128})"
)
# `login apc / apc4ever`: a login keyword, the user and the password, no colon
_BARE_PAIR_RE = re.compile(
    r"(?i:login|log-in|creds|credentials|u/p)[ \t]+"
    r"(?P<u>[\w.@+-]{1,64})[ \t]+/[ \t]+(?P<s>[^\s\"'`<>()\[\]{}]{1,128})"
)
_HOST_RE = re.compile(r"@[\w-]+(?:\.[\w-]+)+|@[\w.-]+:\d")


def _pair_value(m: re.Match[str], glue: str = "") -> tuple[int, int, str] | None:
    """A pair's value (group `s`, its sentence's punctuation trimmed) with its span, or
    None when the match begins inside a word (or right after one of `glue`)."""
    text = m.string
    if m.start() > 0 and (text[m.start() - 1].isalnum() or text[m.start() - 1] in glue):
        return None
    start = m.start("s")
    end = _trim(text, start, m.end("s"))
    return start, end, text[start:end]


def _pair_span(m: re.Match[str]) -> Span | None:
    found = _pair_value(m)
    if found is None:
        return None
    text = m.string
    start, end, value = found
    if _is_placeholder(value) or "/" in value or "\\" in value:
        return None
    if not _credential_like(value, True) or not any(c.isalpha() for c in value):
        return None  # `Login: 09:00`, an ARN's `account:certificate/1234-…`
    if _HOST_RE.search(value):
        return None  # a URL's `user:pass/word@host`, or two addresses
    user_start = m.start("u")
    if (
        text[user_start - 1 : user_start] == ":"
        or "://" in text[max(0, m.start() - 12) : m.start()]
    ):
        return None  # `arn:aws:…:account:…`, `http://username:…`
    return start, end


# The same pair with no keyword, where the user name says it is a login: an address
# (`tom.h@example.com / Binge#Watch3`) or a stock admin account (`admin/Welcome2024!`).
_EMAIL_PAIR_RE = re.compile(
    r"@[\w-]+(?:\.[\w-]+)+(?:[ \t]+/[ \t]+|[ \t]*:[ \t]*)(?P<s>[^\s\"'`<>()\[\]{}]{1,128})"
)
_ADMIN_USERS = r"admin|administrator|root|sa|postgres|guest|pi|ubuntu|superuser"
_ADMIN_PAIR_RE = re.compile(
    rf"(?i:{_ADMIN_USERS})/(?P<s>[^\s/\"'`<>()\[\]{{}}]{{6,64}})(?![^\s.,;!?])"
)
# `admin / Stag1ng-Adm1n`, `root / devroot!`: written apart, a pair and no path
_ADMIN_SPACED_RE = re.compile(
    rf"(?i:{_ADMIN_USERS})[`\"']?[ \t]+/[ \t]+"
    r"(?P<q>[`\"']?)(?P<s>[^\s/\"'`<>()\[\]{}]{4,64})(?P=q)(?![^\s.,;!?])"
)


_PATH_GOES_ON_RE = re.compile(r"[\"'`]?[ \t]*/")


def _spaced_pair_span(m: re.Match[str]) -> Span | None:
    found = _pair_value(m, "/._-")
    if found is None:
        return None
    start, end, value = found
    if value[0] in "_." or not any(c.isdigit() or c in "!@#$%^&*+=?~" for c in value):
        return None  # `ROOT / "_core"`: a path's parts, not a login
    if _PATH_GOES_ON_RE.match(m.string, end):
        return None  # `ROOT / "f2py" / "__init__.pyi"`
    return (start, end) if _credential_like(value, True) else None


def _loose_pair_span(m: re.Match[str]) -> Span | None:
    text = m.string
    if m.group().startswith("@"):
        if m.start() == 0 or not (text[m.start() - 1].isalnum() or text[m.start() - 1] in "._+-"):
            return None
        line = text[text.rfind("\n", 0, m.start()) + 1 : m.start()].split()
        if line and "://" in line[-1]:
            return None  # the user and host of a URL
    elif m.start() > 0 and (text[m.start() - 1].isalnum() or text[m.start() - 1] in "/._-"):
        return None
    start = m.start("s")
    end = _trim(text, start, m.end("s"))
    return (start, end) if _password_like(text[start:end]) else None


# No `\b` in front: a pattern that starts with its literals lets `re` skip to them (twice
# as fast); the span checks the left edge.
_PROSE_SEEK = re.compile(rf"{_trie(_KEYWORDS_ALL)}(?![a-z0-9_]){_LINK_AHEAD}")

BUILTIN += [
    Detector(
        "keyword_secret",
        _PROSE_KW_RE,
        (),  # the seek is the prefilter: an anchor per keyword cost more than it saved
        _not_code(_prose_span),
        9,
        fold=True,
        # a whole keyword at a word start: far fewer tries than its letters anywhere
        # and only where a link can follow: most keywords in text are just words
        seek=_PROSE_SEEK,
    ),
    Detector(
        "keyword_secret",
        _USE_AS_RE,
        (" as ",),
        _use_as_span,
        9,
        fold=True,
        seek=re.compile(r"(?:use|used|using|try|tried|set|chose|chosen|picked|put)[ \t]"),
    ),
    Detector(
        "keyword_secret",
        _PAIR_RE,
        (),
        _pair_span,
        9,
        fold=True,
        seek=re.compile(
            rf"{_trie(_PAIR_KW.replace('wi-?fi', 'wifi|wi-fi').split('|'))}(?![a-z0-9])"
            r"(?=[ \t]*[:=]|[ \t]+(?:are|is|were|was|for|to|of|on|at)[ \t])"
        ),
    ),
    Detector(
        "keyword_secret",
        _CORRECTION_RE,
        (
            "wait",
            "sorry",
            "oops",
            "correction",
            "actually",
            "i mean",
            "my bad",
            "new one",
            "changed",
        ),
        _correction_span,
        9,
        fold=True,
        seek=re.compile(rf"{_trie((*_CORRECTION_WORDS, 'new one'))}(?![a-z])"),
    ),
    Detector(
        "keyword_secret",
        _RECOVERY_RE,
        ("code", "key"),
        _recovery_span,
        9,
        fold=True,
        seek=re.compile(
            _trie(
                _words("recovery backup 2fa mfa two-factor 2-step emergency scratch one-time host")
            )
            + r"[ \t-]+(?:code|key)"
        ),
    ),
    Detector(
        "keyword_secret",
        _BARE_PAIR_RE,
        (" / ",),
        _pair_span,
        9,
        fold=True,
        seek=re.compile(r"(?:login|log-in|creds|credentials|u/p)[ \t]+\S+[ \t]+/[ \t]"),
    ),
    Detector("keyword_secret", _TABLE_ROW_RE, ("|",), _table_span, 9),
    # a BitLocker recovery key, which nothing else has the shape of: eight groups of six
    # digits (`408122-553190-…-219987`), named or not
    Detector("keyword_secret", _GROUPED_KEY_RE, (), _grouped_key_span, 11, prose=True),
    Detector("keyword_secret", _BITLOCKER_RE, ("-",), group_span(0), 9),
    Detector("keyword_secret", _REPLY_RE, (":",), _reply_span, 9),
    Detector("keyword_secret", _ASK_END_RE, ("?",), _answer_span, 9),
    *(Detector("keyword_secret", r, ("\n",), _answer_span, 9) for r in _ASK_WORD_RES),
    Detector(
        "keyword_secret",
        _FILL_RE,
        ("value=", 'value":', "value':", "value:", "text=", 'text":', "keys=", "input="),
        _fill_span,
        9,
        fold=True,
        seek=re.compile(r"(?:pass|pwd|pin)"),
    ),
    Detector("keyword_secret", _EMAIL_PAIR_RE, ("@",), _loose_pair_span, 9),
    Detector("keyword_secret", _CJK_RE, _CJK_KEYWORDS, _cjk_span, 9),
    Detector(
        "keyword_secret",
        _ADMIN_PAIR_RE,
        ("admin/", "root/", "sa/", "postgres/", "guest/", "pi/", "ubuntu/", "superuser/"),
        _loose_pair_span,
        9,
        fold=True,
        seek=re.compile(r"(?:admin|administrator|root|sa|postgres|guest|pi|ubuntu|superuser)/"),
    ),
    Detector(
        "keyword_secret",
        _ADMIN_SPACED_RE,
        (" / ",),
        _spaced_pair_span,
        9,
        fold=True,
        seek=re.compile(rf"(?:{_ADMIN_USERS})[`\"']?[ \t]+/[ \t]"),
    ),
]

# ---- secrets shaped like passwords, told without a keyword ------------------------------
# Most secrets the held-out sets missed were told without a keyword next to them (`I've
# reset it to Sunshine!88`, `old was …, new is Qz8!lmVr31`). A word of capitals, small
# letters and digits with a symbol inside it (`Poppy!Seed9`, `C0reSw!tch#9`,
# `Tr0ub4dor&3`, `CouncilT@x1`) or one symbol after it (`Welcome123!`, `Un1F1ctrl$`) is a
# password wherever it stands: prose writes no such word. Not `issue#123`, `file.py#L12`,
# `a!=b1`, `minutes*60` (`*`, `~`, `^` and `.` end a word: arithmetic, versions), an
# address, a path, markup, or a product's name cheered (`iPhone15!`).
_SHAPE_SYMBOLS = "!#$&?@"
# the symbol first (inside a word, or ending one: `Printer22!`): `re` scans for a
# character class far faster than it tries a lookbehind everywhere
_SHAPE_RE = re.compile(r"[!#$&?@](?:(?<=[0-9A-Za-z][!$#&])(?![\w!#$&?@])|[!#$&?@]*(?=[A-Za-z0-9]))")
_SHAPE_CHARS = frozenset(_ALNUM + "!#$&?%+_-@")
_SHAPE_CODE = ("&&", "!=", "**", "??", "?.", "#!", "$$", "&#")
# `issue#123`, `PR#12`, `file.py#L12`: not a word with a capital inside (`BeatDrop#31`)
_SHAPE_REF_RE = re.compile(r"(?:[A-Z]?[a-z0-9_.-]*|[A-Z0-9_.-]*)#L?\d+(?:-L?\d+)?")
_SHAPE_METRIC_RE = re.compile(r"[\w-]+@\d+")
_SHAPE_TAIL = "!$#&"  # one symbol that may end a password (`?` ends a question)


def _shape_span(m: re.Match[str]) -> Span | None:
    text = m.string
    start, end = m.start(), m.end()
    if start == 0 or text[start - 1] not in _ALNUM:
        return None
    while start > 0 and text[start - 1] in _SHAPE_CHARS:
        start -= 1
    while end < len(text) and text[end] in _SHAPE_CHARS:
        end += 1
    if start > 0 and text[start - 1] in "@/\\:=<[{}.`$":
        return None  # part of an address, a path, a file name, an assignment, markup, TeX
    if end < len(text) and (
        text[end] in "/\\=(`]" or (text[end] == "." and text[end + 1 : end + 2].isalnum())
    ):
        return None  # `Jo2@mail.example`, `Tab3!.select`
    while end > start and text[end - 1] in ",?-_":  # a sentence's end, not the word's
        end -= 1
    if text[end - 2 : end] == "!!":
        while end > start and text[end - 1] == "!":  # `Summer2024!!!`: cheering
            end -= 1
    lead = start
    while start < end and text[start] in "_-#&$?!@":
        start += 1
    if "$" in text[lead:start]:
        return None  # `$P_4$-free`: TeX
    value = text[start:end]
    if re.search(r"#[a-z]", value) and not any(c in value for c in "!$&?@"):
        return None  # `Http2Stream#setTimeout`, `Parser#varDecl2`: a method, an anchor
    if not 8 <= len(value) <= 64 or any(c in value for c in _SHAPE_CODE):
        return None
    if not (
        any(c.islower() for c in value)
        and any(c.isupper() for c in value)
        and any(c.isdigit() for c in value)
    ):
        return None
    if sum(c.isalpha() for c in value) < 3 or _SHAPE_REF_RE.fullmatch(value):
        return None
    if _SHAPE_METRIC_RE.fullmatch(value):
        return None  # `Recall@10`, `nDCG@5`: a measure at a cut-off
    symbols = sum(c in _SHAPE_SYMBOLS for c in value)
    if symbols * 4 > len(value):
        return None  # `B$3$N$?$a!`: escape sequences, not a word
    if symbols == value.count("@") and not any(c.isupper() for c in value.split("@")[0]):
        return None  # `ec2-user@i-02573cafc`: a user at a host
    core = value.strip(_SHAPE_SYMBOLS)
    if any(c in _SHAPE_SYMBOLS for c in core):
        return start, end
    tail = value[len(core) :]
    if len(tail) != 1 or tail not in _SHAPE_TAIL or value[0] in _SHAPE_SYMBOLS or len(core) < 7:
        return None
    if _CRED_NOT_RE.fullmatch(core):
        return None  # `Windows11!`
    return start, end


# A recovery phrase written with no keyword: 12, 15, 18, 21 or 24 lowercase words alone on
# a line (or after a colon), none of them a word every English sentence has.
_SEED_RUN = r"(?P<s>[a-z]{3,8}(?:[ \t][a-z]{3,8}){11,23})[ \t]*(?=$|\r?\n|[.,])"
_SEED_RUN_RES = tuple(  # a literal first: `re` scans for it fast (a `^` is tried everywhere)
    re.compile(start + r"[ \t]*" + _SEED_RUN) for start in (r"\A", r"\n", ":")
)
_SEED_RUN_STOP = frozenset(
    _words("""the and for but not you are was were with this that from have has had what
    when where which who will would can could should into onto over than then them they
    their there these those your our its his her she him all any some one two out about
    just like also very more most such only own same too how why let get got did does""")
)


# A run after a colon whose label says it is a list of things (`shopping list: milk eggs …`).
_LIST_LABEL_RE = re.compile(
    r"\b(?:list|lists|items|ingredients|groceries|grocery|shopping|tags|keywords|topics|agenda"
    r"|menu|todo|to-do|supplies|packing|inventory|vocab|vocabulary|glossary)\b[^\n:]*\Z",
    re.I,
)


# A line of nothing but lowercase words (a vocabulary's line, a run's neighbour)
_WORD_LINE_RE = re.compile(r"[ \t]*[a-z]{2,12}(?:[ \t]+[a-z]{2,12}){5,}[ \t]*\r?")


def _in_word_block(text: str, start: int, end: int) -> bool:
    """Whether the line of [start, end) is one of several lines of lowercase words whose
    words together are no recovery phrase's count: a vocabulary in code or notes (a
    colour list whose line had 15 words was redacted in a source file), where a phrase
    split over lines (12 + 12) still counts 24."""
    lines = text.split("\n")
    at = text.count("\n", 0, start)
    lo = hi = at
    while lo > 0 and _WORD_LINE_RE.fullmatch(lines[lo - 1]):
        lo -= 1
    while hi + 1 < len(lines) and _WORD_LINE_RE.fullmatch(lines[hi + 1]):
        hi += 1
    if lo == hi:
        return False
    total = sum(len(line.split()) for line in lines[lo : hi + 1])
    return total not in (12, 15, 18, 21, 24)


def _seed_run_span(m: re.Match[str]) -> Span | None:
    words = m.group("s").split()
    if len(words) not in (12, 15, 18, 21, 24) or len(set(words)) < len(words) - 1:
        return None
    if any(w in _SEED_RUN_STOP for w in words):
        return None
    if len({w[:4] for w in words}) < len(set(words)):
        return None  # `colour colours …`: BIP39 words differ in their first four letters
    text = m.string
    if _in_word_block(text, *m.span("s")):
        return None
    if text[m.start() : m.start() + 1] == ":":
        label = text[text.rfind("\n", 0, m.start()) + 1 : m.start()]
        if _LIST_LABEL_RE.search(label):
            return None
    return m.span("s")


# A recovery phrase numbered with no keyword: the words numbered 1 to 12 (15, 18, 21, 24)
# in order, with or without a point after each number (`words as he numbered them: 1
# rival 2 hedgehog 3 cabin … 12 oyster`), on one line or several; redacted whole.
_NUMBERED_RUN_RE = re.compile(
    r"1(?<![\w.]1)[.):]?[ \t]+[a-z]{3,8}"
    r"(?:[ \t,;]*+\r?\n?[ \t]*+\d{1,2}[.):]?[ \t]+[a-z]{3,8}){11,23}+(?![\w])"
)
_NUMBERED_WORD_RE = re.compile(r"(\d{1,2})[.):]?[ \t]+([a-z]{3,8})")


def _numbered_run_span(m: re.Match[str]) -> Span | None:
    words: list[str] = []
    end = m.start()
    for w in _NUMBERED_WORD_RE.finditer(m.group()):
        if int(w.group(1)) != len(words) + 1:
            break
        words.append(w.group(2))
        end = m.start() + w.end()
    nxt = re.match(r"[ \t,;]*\r?\n?[ \t]*(\d{1,2})[.):]?[ \t]", m.string[end : end + 16])
    if nxt is not None and int(nxt.group(1)) == len(words) + 1:
        return None  # a longer numbered list: steps, not a phrase
    if len(words) not in (12, 15, 18, 21, 24) or len(set(words)) < len(words) - 1:
        return None
    if any(w in _SEED_RUN_STOP for w in words):
        return None
    return m.start(), end


BUILTIN += [
    Detector("shaped_password", _SHAPE_RE, (), _not_code(_shape_span), 10, prose=True),
    *(Detector("keyword_secret", r, (), _seed_run_span, 10, prose=True) for r in _SEED_RUN_RES),
    Detector("keyword_secret", _NUMBERED_RUN_RE, (), _numbered_run_span, 10, prose=True),
]

# ---- a code a little after what it opens -------------------------------------------------
# `door code 0417, alarm 5512 then OFF`, `gym side door code after 10pm is 198402`, `Hotel
# room safe: I set it to 1988`, `il codice del portone è 2207`, `Kapı şifresi 1919`: a
# keyword of a numeric code (a PIN, a code of a lock, what a code opens) and, in the same
# clause and at most 40 characters on, 3 to 8 digits (or pairs `80 12 44`, `19-43-07`)
# right after the keyword or after a link word that ends the words between (`is`, `:`,
# `to`, `it's`, `è`, `je` ...). Not a time, a count or a measure (`300 pins`, `10pm`), not
# a year after a preposition (`in 2019`), and a plain `code` only near a lock noun and not
# after a kind of code that is no secret (`zip code`, `error code`).
_NEAR_CODE_WORDS = (
    *_words("""pin pins pincode pinkod pinkode pin-code passcode passcodes combination combo
    code codes codice código codigo koodi kode koden kod kód kodu şifre şifresi alarm alarms
    safe door gate keypad lockbox keybox keysafe padlock locker intercom tresor trezor
    digicode türcode sejf kluis cofre kapukód codul codi код кодом κωδικός 비밀번호
    קוד הקוד رمز पिन override"""),
    "pass code",
    "namba ya siri",  # Swahili: a PIN
)
_NEAR_CODE_RE = re.compile(rf"(?<![\w.@/-])(?:{_trie(_NEAR_CODE_WORDS)})(?![\w-])", re.I)
_NEAR_DIGITS_RE = re.compile(
    r"(?<![\w.,:/#+$€£-])(?:\d{2}(?:[ -]\d{2}){2,3}|\d(?: \d){3,7}|\d{3,8})"
    r"(?![\w%]|[.,:/-]\d|[ -]\d)"
)
_NEAR_END_RE = re.compile(r"[.!?;](?:\s|$)|\n|\([^)]*$")
_NEAR_LINK_RE = re.compile(
    r"(?:'s|’s|(?:^|[\s,])(?:is|was|are|=|to|now|it's|it’s|its|c'est|c’est|c'était|c’était|était|est|è"
    r"|é|es|és|este|ist|lautet|war|je|είναι|ay|ni|הוא|היא"
    r"|er|är|on|be|then|use|enter|press|punch|dial|type))[ \t]*:?[ \t]*\Z"
    r"|[:=→>][ \t]*\Z|\s[\-–—][ \t]*\Z|\A,?[ \t]*\Z",
    re.I,
)
_NEAR_UNIT_RE = re.compile(
    r"[ \t]*(?:am|pm|h|hrs?|hours?|min|mins|minutes?|secs?|seconds?|s|days?|weeks?|months?"
    r"|years?|%|percent|digits?|characters?|chars|times|people|pins|items|units|pages?|words?"
    r"|steps?|meters?|metres?|m|cm|mm|km|kg|g|mb|gb|kb|ms|€|eur|euros?|usd|dollars?|pounds?"
    r"|x|px|rpm|mph|kmh|v|w|kw|mah)\b",
    re.I,
)
_NEAR_NUMBERED_RE = re.compile(
    r"(?:room|flat|unit|apt|apartment|floor|suite|no|nr|number|ext|extension|tel|phone|bus"
    r"|platform|route|page|chapter|version|v|issue|ticket|order|invoice|account|acct|ref"
    r"|model|serial|year|gate)\.?[ \t]*#?[ \t]*\Z",
    re.I,
)
_NEAR_YEAR_RE = re.compile(
    r"(?:in|since|from|until|till|by|before|after|of|during|around|circa|year|since)[ \t]+\Z",
    re.I,
)


# `код от подъезда 2749, квартира 47`, `رمز البوابة الخلفية ٧٣٩٢`: where a language writes
# no verb for `is`, one to three words that name the lock between the keyword and digits
# that end the clause
_LOCK_GAP_RE = re.compile(r"[ \t]+(?:[^\W\d_]+[ \t]+){1,3}")


# After a code that only a lock noun announces (`alarm 5512`), the clause ends or goes on
# to what is done with it.
_NEAR_CLAUSE_ENDS_RE = re.compile(
    r"[ \t]*(?:$|[,;.!?)\]—–+&-]"
    r"|(?:then|to|and|or|on|in|if|for|plus|but|so|pls|please|after|before|when|until)\b)",
    re.I,
)


# A dial's turns after a lock, with no keyword and link before them (`The safe combination
# only lives in my head, so: L 24, R 8, L 61`, `gun safe dial: R 22 L 8 R 40`, `… has a new
# combo. Left 24, right 11, left 38`): three to six turns, to the left and to the right by
# turns, on the lock word's line and at most 120 characters on. Looked for from the lock
# words `_near_code_span` finds anyway: a scan of its own for them cost 3% of the time.
_DIAL_TURN = r"(?:(?:[LR]|(?i:left|right))[ ]?\d{1,2}|\d{1,2}[ ]?(?:[LR]|(?i:left|right))(?![\w]))"
_DIAL_RE = re.compile(rf"(?<![\w.-]){_DIAL_TURN}(?:[ ]*,?[ ]+{_DIAL_TURN}){{2,5}}(?![\w.-])")
_DIAL_AFTER_RE = re.compile(r"[ ]*(?:blocks?|streets?|turns?|exits?|lanes?)\b", re.I)
_DIAL_WORDS = frozenset(
    _words("safe locker padlock combo combination tresor trezor sejf kluis cofre lockbox")
)


def _dial_after(text: str, pos: int) -> Span | None:
    end = text.find("\n", pos, pos + 120)
    d = _DIAL_RE.search(text, pos, pos + 120 if end < 0 else end)
    if d is None:
        return None
    sides = [t[0].upper() for t in re.findall(r"[LR]|left|right", d.group(), re.I)]
    if any(a == b for a, b in itertools.pairwise(sides)):
        return None  # a dial turns one way, then the other
    if _NEAR_UNIT_RE.match(text, d.end()) or _DIAL_AFTER_RE.match(text, d.end()):
        return None  # `left 2, right 3, left 4 blocks`: a way, not a lock's turns
    if _CODE_LINE_RE.search(text, pos, d.end()):
        return None
    return d.span()


def _near_code_span(m: re.Match[str]) -> Span | None:
    text = m.string
    kw = m.group().lower()
    window = text[m.end() : m.end() + 40]
    end = _NEAR_END_RE.search(window)
    if end is not None:
        window = window[: end.start()]
    if kw in _PLAIN_CODES or kw in ("code", "codes", "override"):
        before = text[max(0, m.start() - 24) : m.start()].split()
        if before and before[-1].lower().strip(".,:;") in _NOT_SECRET_CODES:
            return None
        around = text[max(0, m.start() - 60) : m.end() + len(window)]
        if not (
            _LOCK_NOUN_RE.search(around)
            or _OTP_BEFORE_RE.search(text, max(0, m.start() - 24), m.start())
        ):
            return None
    for d in _NEAR_DIGITS_RE.finditer(window):
        gap = window[: d.start()]
        if not _NEAR_LINK_RE.search(gap) and not (
            _LOCK_GAP_RE.fullmatch(gap)
            and _LOCK_NOUN_RE.search(gap)
            and _NEAR_CLAUSE_ENDS_RE.match(window, d.end())
        ):
            continue
        if _NEAR_NUMBERED_RE.search(gap) or _ENDING_RE.search(gap.rstrip()):
            continue
        value = d.group()
        if _NEAR_UNIT_RE.match(window, d.end()):
            continue
        if kw in _LOCK_ALONE and (
            not _NEAR_CLAUSE_ENDS_RE.match(window, d.end())
            or (not gap.strip() and _NEAR_CODE_RE.search(text, m.end() + d.end(), m.end() + 80))
            # `door 204`, `gate 112`, `locker 318`: a number of three digits or fewer
            # right after the noun names the door, not its code
            or (not gap.strip(" \t,") and value.isdigit() and len(value) <= 3)
        ):
            continue  # `alarm: 0630 wake up`, `locker 212, code 8406`: a time, a number
        if _YEAR_RE.fullmatch(value) and _NEAR_YEAR_RE.search(gap):
            continue
        return m.end() + d.start(), m.end() + d.end()
    return _dial_after(text, m.end()) if kw in _DIAL_WORDS else None


# A list of codes (`phone passcode is 291184, the ipad one is 0505`, `Portkoden är 4417 och
# larmkoden 0815`, `alarm: 2468 to disarm, 2469 is the duress code`): after a numeric code
# any detector found, more digits of about its length in the same sentence, after a list's
# separator and at most five words (the last a link word, or none), are codes too.
_LIST_GAP_RE = re.compile(
    r"[^.!?\n]{0,24}?(?:,|;|\(|—|–|→|\b(?:and|or|und|oder|et|ou|e|y|o|och|eller|og|en|a|i|ve"
    r"|da|und)\b)[ \t]*(?P<words>(?:[^\s.!?]+[ \t]+){0,5}?)(?P<link>[^\s.!?]*[ \t]*)\Z",
    re.I,
)
_ALL_DIGITS_RE = re.compile(r"\d{3,8}|\d{2}(?:[ -]\d{2}){2,3}|\d(?: \d){3,7}")


def continued_codes(text: str, found: Iterable[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """More codes after the numeric codes found, as `(start, end, kind)` (see above)."""
    out: list[tuple[int, int, str]] = []
    for start, end, kind in found:
        if not _ALL_DIGITS_RE.fullmatch(text, start, end):
            continue
        width = sum(c.isdigit() for c in text[start:end])
        at = end
        while True:
            window = text[at : at + 60]
            stop = _SENTENCE_STOP_RE.search(window)
            if stop is not None:
                window = window[: stop.start()]
            nxt = None
            for d in _NEAR_DIGITS_RE.finditer(window):
                gap = window[: d.start()]
                if not _LIST_GAP_RE.fullmatch(gap) or _NEAR_NUMBERED_RE.search(gap):
                    continue
                if _ENDING_RE.search(gap.rstrip()):
                    continue  # `the debit card ending 4410`: the end of a card's number
                if abs(sum(c.isdigit() for c in d.group()) - width) > 2:
                    continue
                if _NEAR_UNIT_RE.match(window, d.end()):
                    continue
                if _YEAR_RE.fullmatch(d.group()) and _NEAR_YEAR_RE.search(gap):
                    continue
                nxt = (at + d.start(), at + d.end())
                break
            if nxt is None:
                break
            out.append((*nxt, kind))
            at = nxt[1]
    return out


_SENTENCE_STOP_RE = re.compile(r"[.!?](?:\s|$)|\n")


# A secret told twice (`the code is four seven seven one, that's four seven seven one`,
# `PIN 2012 ... I typed 2012 again`): another whole occurrence of a value a detector found,
# in the 200 characters after it, is the same secret. Only a value of 4 characters or more
# with a digit or a blank in it: a word (`Name`, `unreserved`) found once in a file of code
# is more often a false positive, which repeating would multiply.
_REPEAT_WINDOW = 200


def _value_char(c: str) -> bool:
    return c.isalnum() or c in "!#$%&*+=@_-/"  # `Garden2024!` is not `Garden2024` again


def repeated_values(text: str, found: Iterable[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """The other occurrences of the values found, as `(start, end, kind)`."""
    out: list[tuple[int, int, str]] = []
    seen: set[str] = set()
    for start, end, kind in found:
        value = text[start:end]
        if len(value) < 4 or value in seen or not any(c.isdigit() or c == " " for c in value):
            continue
        seen.add(value)
        at = text.find(value, end, end + _REPEAT_WINDOW + len(value))
        while at >= 0:
            after = at + len(value)
            # (at > end: there is a character before it)
            if not _value_char(text[at - 1]) and (
                after == len(text) or not _value_char(text[after])
            ):
                out.append((at, after, kind))
            at = text.find(value, after, end + _REPEAT_WINDOW + len(value))
    return out


# The other entries of a list that holds a secret found in prose (`passwords for grandma:
# facebook Rosebud1944, email Rosebud1944!, bank GardenGnome7`, `gmail: Hx!72kDp⏎dropbox:
# cloudyday⏎spotify: Mixtape_90s`, `Streaming: Netflix Binge#Watch3; Disney+ MickeyEars22`):
# an entry is a label and a value, on lines of the same layout next to the found one, or
# after a `,` or a `;` on its line. A value with a digit or a symbol is a secret; a plain
# word only where the list's lead names passwords or logins. Not a field that is no secret
# (`user:`, `host:`, `email:`, `port:`), an address, a path, a number or a measure; only
# after prose detectors: the neighbours of an assignment in a config file are its settings.
_ENTRY_LINE_RE = re.compile(
    r"[ \t]*(?:(?:[-*•]|\d{1,2}[.)])[ \t]+)?(?:\*\*|__)?(?P<label>[^\n:–—→=|]{1,32}?)(?:\*\*|__)?"
    r"(?P<sep>[ \t]*(?:\*\*|__)?(?::|–|—|→|->|=)(?:\*\*|__)?[ \t]*|[ \t]+-[ \t]+)"
)
_LINE_REST_RE = re.compile(r"[\"'`”’]?[ \t]*(?:\([^()\n]{0,40}\))?[ \t]*[.!]?[ \t]*")
_LIST_LINES = 12  # entry lines looked at on each side of the found one
_ENTRY_VALUE_RE = re.compile(
    r"[^\s,;]{3,64}(?=[ \t]*(?:\([^()\n]{0,40}\))?[ \t]*[.!]?[ \t]*$)", re.M
)
_SEGMENT_RE = re.compile(
    r"(?:[,;]|(?<=:))[ \t]+(?:and[ \t]+)?(?P<label>(?:[\w+&'’.-]+[ \t]+)?[\w+&'’.-]+?)"
    r"(?:[ \t]*(?::|–|—|→|=)[ \t]*|[ \t]+-[ \t]+|[ \t]+)(?P<value>[^\s,;]{3,64}?)"
    r"(?=[.!]?[ \t]*(?:[,;]|$))",
    re.M,
)
_FIELD_LABELS = frozenset(
    _words("""user username user-name login email e-mail mail url link site website web host
    hostname server port name id account acct ssid network db database region phone tel
    address addr ip domain from to cc subject date time version year number no nr type
    account-id tenant owner admin wifi wi-fi wlan sieć netz réseau red rete netwerk nätverk
    nettverk netværk verkko síť ağ adı nombre nom naam namn nazwa nome имя сеть""")
)
# words that make a label a clause, not an entry's name: `network is …`, `same as …`
_NOT_LABEL_WORDS = frozenset(
    _words("is was are were be the a an my your our his her their its as it this that same")
)
_LIST_LEAD_RE = re.compile(
    r"pass(?:word|wd|code)?s?\b|pws\b|pwds\b|logins?\b|log-?ins\b|accounts?\b|creds?\b"
    r"|credentials\b|sign-?ins?\b|codes\b|pins\b|wachtw|contrase|mots? de passe|passw",
    re.I,
)
_PROSE_KINDS = frozenset(("keyword_secret", "shaped_password"))


def _entry_value_ok(value: str, label: str, plain: bool, digits: bool = False) -> bool:
    """Whether an entry's value is a secret (see above): `plain` when the lead names
    passwords, `digits` in a list of codes."""
    words = label.strip(" \t*_").lower().split()
    if not words or any(w in _FIELD_LABELS or w in _NOT_LABEL_WORDS for w in words):
        return False
    if value.isdigit():  # a code in a list of codes: `front door 2468, alarm 13579`
        return digits and 4 <= len(value) <= 8 and not _YEAR_RE.fullmatch(value)
    if "@" in value or "://" in value or value.startswith(("/", "~", ".")):
        return False
    if _MEASURE_RE.fullmatch(value) or _is_placeholder(value) or _CRED_NOT_RE.fullmatch(value):
        return False
    if _credential_like(value, True):
        return True
    low = value.lower()
    return (
        plain
        and value.isalpha()
        and len(value) >= 5
        and low not in _NOT_ANSWERS
        and low not in _DESCRIBING
        and low not in _PHRASE_STOP
    )


def listed_values(text: str, found: Iterable[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """The other values of the lists the prose secrets found stand in, as `(start, end,
    kind)` (see above)."""
    out: list[tuple[int, int, str]] = []
    done: set[int] = set()
    for start, end, kind in found:
        if kind not in _PROSE_KINDS:
            continue
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        line_end = len(text) if line_end < 0 else line_end
        if line_start not in done:
            done.add(line_start)
            out += _line_entries(text, line_start, end, line_end, kind)
        out += _segment_entries(text, line_start, start, end, line_end, kind)
    return out


def _line_entries(
    text: str, line_start: int, end: int, line_end: int, kind: str
) -> list[tuple[int, int, str]]:
    """The values of the lines next to the found one that have its layout."""
    entry = _ENTRY_LINE_RE.match(text, line_start, line_end)
    if entry is None or entry.end() > end or not _LINE_REST_RE.fullmatch(text, end, line_end):
        return []  # the value found is not what ends an entry line
    sep = entry.group("sep").strip(" \t*_")
    lines: list[tuple[int, int]] = []
    top = line_start
    for step in (-1, 1):
        lo, hi = line_start, line_end
        for _ in range(_LIST_LINES):
            if step < 0:
                if lo == 0:
                    break
                lo, hi = text.rfind("\n", 0, lo - 1) + 1, lo - 1
            else:
                if hi >= len(text):
                    break
                lo = hi + 1
                nl = text.find("\n", lo)
                hi = len(text) if nl < 0 else nl
            e = _ENTRY_LINE_RE.match(text, lo, hi)
            if e is None or e.group("sep").strip(" \t*_") != sep:
                break
            lines.append((lo, hi))
            top = min(top, lo)
    heading = text[text.rfind("\n", 0, max(0, top - 1)) + 1 : max(0, top - 1)]
    plain = bool(_LIST_LEAD_RE.search(heading))
    out = []
    for lo, hi in lines:
        e = _ENTRY_LINE_RE.match(text, lo, hi)
        v = _ENTRY_VALUE_RE.search(text, e.end(), hi) if e is not None else None
        if e is None or v is None:
            continue
        piece = text[e.end() : hi].rsplit(sep, 1)[-1].rsplit(" / ", 1)[-1]  # `user / pass`
        if len(_ASIDE_RE.sub("", piece).split()) != 1:
            continue  # `Audible – on my amazon`: words, not a value
        value_end = _trim(text, v.start(), v.end())
        if _entry_value_ok(text[v.start() : value_end], e.group("label"), plain):
            out.append((v.start(), value_end, kind))
    return out


def _segment_entries(
    text: str, line_start: int, start: int, end: int, line_end: int, kind: str
) -> list[tuple[int, int, str]]:
    """The entries chained by `,` or `;` to the found one on its line, from the list's
    lead (`passwords for grandma: facebook …, email …, bank GardenGnome7`) or from it."""
    colon = text.rfind(":", line_start, start)
    plain = colon >= 0 and bool(_LIST_LEAD_RE.search(text, line_start, colon))
    digits = text[start:end].isdigit()
    out: list[tuple[int, int, str]] = []
    if colon >= 0:  # the entries before the found one, when they chain up to it
        chained, at = [], colon + 1
        while at < start:
            m = _SEGMENT_RE.match(text, at, line_end)
            if m is None:
                break
            chained.append(m)
            at = m.end("value")
        if at == end or (chained and chained[-1].start("value") == start):
            out += _segment_values(
                text, chained[:-1] if at == end else chained, plain, digits, kind
            )
    at, chained = end, []
    while (m := _SEGMENT_RE.match(text, at, line_end)) is not None and len(chained) < 12:
        chained.append(m)
        at = m.end("value")
    return out + _segment_values(text, chained, plain, digits, kind)


def _segment_values(
    text: str, chained: list[re.Match[str]], plain: bool, digits: bool, kind: str
) -> list[tuple[int, int, str]]:
    out = []
    for m in chained:
        value_end = _trim(text, m.start("value"), m.end("value"))
        value = text[m.start("value") : value_end]
        if _entry_value_ok(value, m.group("label"), plain, digits):
            out.append((m.start("value"), value_end, kind))
    return out


# A code entered on or set for a lock its sentence names, with no word for a code: `for
# the hotel safe I used 271828`, `press 4417 on the intercom pad`, `the safe … so i put
# 1988, the year we met`, `Der Tresor im Büro geht mit 19-43-07 auf`. The digits right
# after a verb of keying in or setting; not a measure, a price or a count.
_ENTERED_DIGITS_RE = re.compile(
    # (a digit first and a blank behind it: `re` scans for digits far faster than for blanks)
    r"\d(?<=[ \t]\d)(?:\d{0,3}(?:[-–]\d{1,4}){1,5}|\d{2,7})(?![\w%€$£]|[.,:/-]\d|[ \t]?\d)"
)
_ENTERED_VERB_RE = re.compile(
    r"(?:\b(?:press(?:ed)?|enter(?:ed)?|punch(?:ed)?(?:[ \t]+in)?|dial(?:led)?|key(?:ed)?[ \t]+in"
    r"|typed?|used?|put|set|chose|picked|takes|wants|accepts|geht[ \t]+mit"
    r"|(?:disarm|unlock|open)(?:s|ed)?"
    r"(?:[ \t]+it)?[ \t]+with)[ \t]+)\Z",
    re.I,
)
_ENTRY_LOCK_RE = re.compile(
    r"\b(?:safe|locker|padlock|keypad|intercom|alarm|lockbox|keybox|key[ \t]?safe|tresor|trezor"
    r"|lock|gate|door|sejf|kluis|cofre|caja[ \t]+fuerte|cadenas|candado|lucchetto|tür|porte"
    r"|puerta|cassaforte|schlüssel(?:kasten|safe|tresor))(?:s|es|e|en)?\b",
    re.I,
)
# what follows a code keyed in: the clause ends, or says where or why
_ENTERED_AFTER_RE = re.compile(
    r"[ \t]*(?:$|[,.;!?)\n]|(?:on|for|so|as|to|then|and|auf|at|in|into|first|now|if|within)\b)",
    re.I | re.M,
)
# what a lock `takes` or `wants` is a code when the clause ends or goes on to what is keyed
# next (`the keypad takes 5830 then the up arrow`), not a price or a count (`… 1500 for`)
_WANTS_RE = re.compile(r"(?:takes|wants|accepts)\b", re.I)
_WANTS_NOT_AFTER_RE = re.compile(r"[ \t]+(?:to|for|as|in|on|so|at|into|now|if)\b", re.I)
_OPENS_RE = re.compile(r"(?:disarm|unlock|open)", re.I)  # a lock's verb: `phone unlocks with`
_ENTRY_SENTENCE_RE = re.compile(r"[.!?;](?=\s)|\n")


def _entered_span(m: re.Match[str]) -> Span | None:
    text = m.string
    start, end = m.span()
    verb = _ENTERED_VERB_RE.search(text, max(0, start - 24), start)
    if verb is None or not _ENTERED_AFTER_RE.match(text, end):
        return None  # `set 1500 aside`, `used 2000 calories`: an amount, or no verb
    if _WANTS_RE.match(verb.group()) and _WANTS_NOT_AFTER_RE.match(text, end):
        return None  # `the locksmith wants 1500 for the door`: a price
    lo = max(0, start - 100)
    stops = list(_ENTRY_SENTENCE_RE.finditer(text, lo, start))
    lo = stops[-1].end() if stops else lo
    stop = _ENTRY_SENTENCE_RE.search(text, end, end + 100)
    hi = stop.start() if stop is not None else min(len(text), end + 100)
    opens = _OPENS_RE.match(verb.group()) is not None
    if not (opens or _ENTRY_LOCK_RE.search(text, lo, hi)) or _CODE_LINE_RE.search(text, lo, hi):
        return None
    return start, end


BUILTIN += [
    Detector(
        "keyword_secret",
        _NEAR_CODE_RE,
        (),
        _near_code_span,
        9,
        fold=True,
        seek=re.compile(rf"{_trie(_NEAR_CODE_WORDS)}(?![a-z0-9_-])"),
    ),
    Detector("keyword_secret", _ENTERED_DIGITS_RE, (), _entered_span, 11, prose=True),
]


# ---- a password-shaped word where passwords are talked about ------------------------------
# `use Wombat#2210 to log in`, `I've tried Molly2015 and molly2015!`, `crunchyroll animeNight99
# ← that's the password`, `what's the guest wifi pw?⏎Tom: BlueDesk#guest`: a word of letters
# with digits or a symbol, not tied to a keyword by any phrasing the rules above read, but
# near a word for a password or a login (the same line, 60 characters either way, or the
# line before). Not an address, a file, a version or a product's name, nor the name of a
# user, an account or a network (`user is sam.k`, `network is Casa_Rossi_5G`).
_CRED_CONTEXT_ANCHORS = (
    "pass", "pw", "pwd", "login", "log in", "log-in", "logging in", "sign in", "signin",
    "wifi", "wi-fi", "cred", "heslo", "senha", "contrase", "clave", "mot de passe", "mdp",
    "wachtwoord", "lösen", "passord", "adgangskode", "salasana", "hasło", "şifre", "parola",
    "sandi", "khẩu", "пароль", "кодов", "كلمة السر", "كلمة المرور", "סיסמ", "비밀번호",
    "requirepass", "locked out", "unlock", "keystore", "locked", "reset", "forgot", "forget",
    "mistyped", "sign-in", "sign-on", "signon",
)  # fmt: skip
_CRED_CONTEXT_RE = re.compile(
    # a bare `pass` only as a noun (`the pass is`, `pass: …`, `pass for the lobby`): not
    # Python's statement, nor `pass the salt`
    r"(?<![a-z])(?:pass(?=[ \t]*(?::|=|\?|\)|is\b|iz\b|was\b|for\b|of\b|again\b))"
    r"|pass(?:word|wort|wd|code|phrase|ord)s?|pw|pwd|log(?:ging|ged)?[ -]?ins?"
    r"|sign[ -]?(?:in|on)s?|wi-?fi|creds?|credentials?|heslo|senha|contrase(?:ñ|n)a|clave"
    r"|mot de passe|mdp"
    r"|wachtwoord|lösenord(?:et)?|passordet|adgangskoden?|salasana|hasło|şifre(?:si)?|parola"
    r"|kata sandi(?:nya)?|sandi(?:nya)?|mật khẩu|пароль|كلمة (?:السر|المرور)|ה?סיסמה|비밀번호"
    r"|requirepass|locked out|unlock(?:s|ed)?|keystore"
    # what is said of a password in a support chat: `I've tried Molly2015 … can you reset
    # it?`, `I typed Hammock42 … and now it's locked`
    r"|(?:it'?s|is|got|was|gets|account)[ \t]+locked|reset[ \t]+(?:it|my|his|her|your)"
    r"|forgot(?:ten)?|forgetting|mis-?typed)(?![a-z])",
    re.I,
)
_CRED_WORD_RE = re.compile(  # a word with a digit or a symbol in it: ordinary words are passed
    r"(?<![\w@./\\:#$+-])[A-Za-z](?=[\w!#$&*?@%+-]*[0-9!#$&*?@%])[\w!#$&*?@%+-]{4,40}"
    r"(?![\w@/\\-])"
)
_CRED_NOT_RE = re.compile(
    r"(?:v?\d|x86|x64|arm64|amd64|win32|win64|utf|sha\d|md5|base64|ipv|mp[34]|h26[45]|covid"
    r"|windows|iphone|ipad|pixel|galaxy|ps[345]|xbox|python|gpt|es20|office|ubuntu|debian"
    r"|macos|android|java|html|css|http|tls|ssl|oauth|web[23]|b2[bc]|[0-9]fa|mfa|\d+p"
    r"|\d+k|utf8|ascii|rfc\d|iso\d|pep\d|cve-|ec2|s3)\w*",
    re.I,
)
_CRED_NAME_BEFORE_RE = re.compile(
    r"(?:user(?:[ _-]?name)?|login|e-?mail|account|acct|network|netz|ssid|name|id|handle"
    r"|called|named|nick(?:name)?|from|by|with|as|heißt|sieć|usuário|usuario|utilisateur"
    r"|benutzer(?:name)?|brukernavn|käyttäjä|uživatel|kullanıcı|@)[ \t]*(?:is|was|:|=|-|–)?"
    r"[ \t]*[\"'“]?\Z",
    re.I,
)
# After the word: it is the user's half of a pair (`class4b / kangaroo77`, `frontdesk1 pwd
# Kibble_88`), or the password is told later (`the wifi is HomeNet5G and the pass is …`).
_CRED_PAIR_AFTER_RE = re.compile(r"[\"'”]?[ \t]*(?:/|\||\\)[ \t]*\S|[ \t]+(?:pw|pwd|pass)\b", re.I)
_CRED_TOLD_LATER_RE = re.compile(
    r"(?:pass(?:word|wort|wd|code)?|pw|pwd|senha|contrase(?:ñ|n)a|heslo|hasło|key)"
    r"[ \t]*(?:is|was|:|=|ist|est|é|è|je|er|är)(?:[ \t]+\S|[ \t]*\Z)",
    re.I,
)


# Shapes of other things: a commit id, `query#fragment`, `svn+ssh`, `re$read`, `issue28563`,
# markup (`**Revert**`).
_CRED_NOT_SHAPE_RE = re.compile(
    r"\A[0-9a-f]{6,40}\Z|\A[a-z]+[#+$][a-z]+\Z|\A\*|\*\Z|\*\*"
    r"|\A(?:issue|bug|ticket|case|pr|order|ref|id|no|nr|item|build|job|run)[-_]?\d+\Z",
    re.I,
)
_CRED_CODE_AFTER_RE = re.compile(r"[(\[{}]|\.[A-Za-z_]|://|\*|[ \t]*(?:->|=)")
_CODE_LINE_RE = re.compile(
    r"\w\((?:[\w\"'*]|\))|->|\b(?:def|return|import|class|lambda|elif|self)\b|[{};]|==|\w\[|\$\{"
    r"|['\"][^'\"\n]*['\"][ \t]*,[ \t]*r?['\"]"  # a list of strings
)
_LOWER_DIGITS_RE = re.compile(
    r"[A-Za-z]{3,}_?\d{1,6}|[A-Za-z][a-z]*\d+[a-z]+\d*|[a-z]{3,}(?:-[a-z]{3,})+-\d{1,6}"
)
_NETWORK_SUFFIX_RE = re.compile(r"[_-](?:2\.?4|5)g(?:hz)?\Z|[_-]ext\Z", re.I)


def _cred_word_span(m: re.Match[str]) -> Span | None:
    text = m.string
    start, end = m.span()
    while end > start and text[end - 1] in ".,;:?":
        end -= 1
    while end > start and text[end - 1] in "*+":  # markup (`**Dropbox**`), `disney+`
        end -= 1
    value = text[start:end]
    if not 6 <= len(value) <= 40 or sum(c.isalpha() for c in value) < 3:
        return None
    if value.endswith("@") or "%" in value or "&" in value or _CRED_CODE_AFTER_RE.match(text, end):
        return None  # an address, a query string, a call, an attribute, a URL, markup
    if "@" in value and not (any(c.isdigit() for c in value) and any(c.isupper() for c in value)):
        return None  # `me@home`: an address, not `CouncilT@x1`
    if _CRED_PAIR_AFTER_RE.match(text, end) or _CRED_TOLD_LATER_RE.search(
        text, end, min(len(text), end + 60)
    ):
        return None
    digits = sum(c.isdigit() for c in value)
    symbols = sum(c in "!#$&*?@%+" for c in value.rstrip("!?"))  # not a sentence's `!!`
    if _NETWORK_SUFFIX_RE.search(value):
        return None  # `Robinsons_5G`: a network's name
    if not (digits or symbols):
        return None
    lower_and_digits = digits and not symbols and not any(c.isupper() for c in value[1:])
    if lower_and_digits and not _LOWER_DIGITS_RE.fullmatch(value.rstrip("!?")):
        return None  # only `molly2015`, `hbo4life2` of lowercase letters and digits
    if _CRED_NOT_RE.fullmatch(value) or value.isupper() or _CRED_NOT_SHAPE_RE.search(value):
        return None
    if _ALGORITHM_RE.fullmatch(value):
        return None  # `a password … (scram-sha-256)`: how it is checked, not what it is
    line_start = text.rfind("\n", 0, start) + 1
    if _CRED_NAME_BEFORE_RE.search(text, max(line_start, start - 24), start):
        return None
    line_end = text.find("\n", end)
    if _CODE_LINE_RE.search(text, line_start, len(text) if line_end < 0 else line_end):
        return None  # a line of code: its names are identifiers (assignments have their own)
    prev_line = text.rfind("\n", 0, max(0, line_start - 1)) + 1
    lo = max(prev_line, start - 60)
    hi = text.find("\n", end)
    hi = min(len(text) if hi < 0 else hi, end + 60)
    near = _CRED_CONTEXT_RE.search(text, lo, hi)
    while near is not None and start <= near.start() < end:  # the word itself (`pass1234`)
        near = _CRED_CONTEXT_RE.search(text, near.end(), hi)
    if near is None:
        return None
    return start, end


BUILTIN += [
    Detector(
        "keyword_secret",
        _CRED_WORD_RE,
        _CRED_CONTEXT_ANCHORS,
        _cred_word_span,
        11,
        fold=True,
        prose=True,
    ),
]

# ---- what shell history, config files, lists and sentences tell in their own layout ------
# A password after the flag that takes it in commands whose `-p`-like flag is the password
# (`redis-cli -a …`, `zip -P …`, `7z -p…`, `ldapsearch -w …`, `sqlcmd -P …`, `openssl -k …`,
# `-passout pass:…`, `smbclient -U user%…`), `htpasswd -b FILE USER …` (`-nb USER …`), and
# what `echo` pipes to `sudo -S` or `chpasswd`.
# (anchor, the command up to its password): one pattern each, so that `re` scans for the
# command's name as a literal
_TOOL_VALUE = r"(?:'(?P<sv>[^'\r\n]+)'|\"(?P<dv>[^\"\r\n]+)\"|(?P<bv>[^\s\"'`;&|]+))"
_TOOL_ARGS = r"\b[^\n|;&]{0,200}?[ \t]"
_TOOL_FLAGS = (
    ("redis-cli", rf"redis-cli{_TOOL_ARGS}-a[ \t]+"),
    ("zip", rf"(?:un)?zip{_TOOL_ARGS}-P[ \t]+"),
    ("7z", rf"7za?{_TOOL_ARGS}-p"),
    ("ldap", rf"ldap(?:search|modify|add|delete|passwd|whoami){_TOOL_ARGS}-w[ \t]+"),
    ("sqlcmd", rf"sqlcmd{_TOOL_ARGS}-P[ \t]+"),
    ("bcp", rf"bcp{_TOOL_ARGS}-P[ \t]+"),
    ("ipmitool", rf"ipmitool{_TOOL_ARGS}-P[ \t]+"),
    ("mosquitto_", rf"mosquitto_(?:pub|sub){_TOOL_ARGS}-P[ \t]+"),
    ("openssl", rf"openssl{_TOOL_ARGS}(?:-k[ \t]+|-pass(?:in|out)?[ \t]+pass:)"),
    ("smbclient", rf"smbclient{_TOOL_ARGS}-U[ \t]*[^\s%'\"]+%"),
    (
        "htpasswd",
        r"htpasswd[ \t]+(?:-[a-zA-Z]+[ \t]+)*?-(?P<f>[a-zA-Z]*b[a-zA-Z]*)[ \t]+"
        r"(?:-[a-zA-Z]+[ \t]+)*(?P<a>[^\s-]\S*[ \t]+)(?P<b>[^\s-]\S*[ \t]+)?",
    ),
    (
        "echo",
        r"echo[ \t]+(?:-[ne][ \t]+)?(?=(?:'[^'\n]+'|\"[^\"\n]+\"|[^\s|;&'\"]+)[ \t]*\|[ \t]*"
        r"(?:sudo[ \t]+(?:-[a-zA-Z]+[ \t]+)*-[a-zA-Z]*S|chpasswd\b))",
    ),
)


def _tool_flag_span(m: re.Match[str]) -> Span | None:
    flags = m.groupdict().get("f")
    if flags is not None and "n" not in flags and m.group("b") is None:
        return None  # `htpasswd -b FILE USER PASS`: the third argument
    span = _glued_flag_span(m)
    if span is None:
        return None
    value = m.string[span[0] : span[1]]
    if value.startswith("$") or value.isdigit():
        return None  # `-a $REDIS_PASSWORD`, `7z -p1` is no one's password
    if m.group().startswith("echo"):
        pipe = m.string[span[1] : m.string.find("|", span[1]) + 40]
        if "chpasswd" in pipe:  # `echo 'user:pass' | chpasswd`
            colon = value.find(":")
            return (span[0] + colon + 1, span[1]) if 0 < colon < len(value) - 1 else None
    return span


# A constant named for a secret given its literal as the next argument of a call:
# `define('DB_PASSWORD', 'Wp-DB-5521')`, `os.environ.setdefault("API_TOKEN", "…")`,
# `config.set("smtp_password", "…")`.
_NAMED_LITERAL_RE = re.compile(
    r"(?P<q>[\"'])[ \t]*,[ \t]*(?P<q2>[\"'])(?P<v>[^\"'\\\r\n]{1,200})(?P=q2)[ \t]*[),]"
)
_NAME_BEFORE_RE = re.compile(r"(?P<q>[\"'])(?P<name>[A-Za-z_][\w.-]{0,60})\Z")


def _named_literal_span(m: re.Match[str]) -> Span | None:
    text = m.string
    before = _NAME_BEFORE_RE.search(text, max(0, m.start() - 64), m.start())
    if before is None or before.group("q") != m.group("q"):
        return None
    if not text[max(0, before.start() - 8) : before.start()].rstrip().endswith("("):
        return None  # a call's first argument, not an item of a list or a tuple
    parts = re.split(r"[_.-]+", before.group("name").lower())
    if not any(p in _SECRET_NAME_PARTS or p.endswith(_SECRET_NAME_ENDS) for p in parts):
        return None  # `cohere_compass`, `PKAddPassButton`: no secret named
    value = m.group("v")
    strong = any(p.startswith(("pass", "pw")) for p in parts)
    if " " in value or _SNAKE_RE.fullmatch(value) or not _credential_like(value, strong):
        return None  # a label (`"Password"`), a name (`"api_key"`), a placeholder
    if not any(c.isdigit() or c in _SYMBOLS for c in value) or re.search(r":\d+\Z|/", value):
        return None  # a class's name, an address
    return m.span("v")


_SECRET_NAME_PARTS = frozenset(
    _words("password passwd pass pwd pw passphrase passcode secret token key apikey pin")
)
_SECRET_NAME_ENDS = ("password", "passwd", "secret", "token", "apikey")


# A line of a `.pgpass` file: `host:port:database:user:password`.
_PGPASS_RE = re.compile(r":(?:\d{2,5}|\*):[^:\s]+:[^:\s]+:(?P<s>[^\s:]+)[ \t]*$", re.M)


def _pgpass_span(m: re.Match[str]) -> Span | None:
    text = m.string
    host = text[text.rfind("\n", 0, m.start()) + 1 : m.start()]
    if not re.fullmatch(r"[A-Za-z0-9*][\w.-]*", host) or not any(c.isalpha() for c in host):
        return None
    value = m.group("s")
    return m.span("s") if _credential_like(value, True) and not value.isdigit() else None


# The value before its keyword: `4590 is the code for the back gate`, `Hazel2011 was my old
# password`, `7734 is the alarm code btw`, `3141 = alarm code`. The value starts its clause,
# the keyword ends it (or says what it opens), and the words between are a determiner and
# up to three words that are neither a sentence's nor what makes a password an example
# (`123456 is the most common password`).
_BEFORE_KW_END = (
    r"(?![\w-])(?=[ \t]*(?:$|[.,;!?)(\n]|[ \t]+(?:btw|lol|fyi|haha|for|to|of|on|at|in|now|then"
    r"|too|ok|thx|thanks|x|xx|if|when|until)\b))"
)
# the keywords that end such a clause (`… the alarm code`, `… my old password`)
_BEFORE_KW_WORDS = (
    *_words("""password passwort passcode pin pw pwd code combination combo passphrase
    wachtwoord contraseña senha hasło heslo kennwort codice código"""),
    "mot de passe",
)
_BEFORE_KW_RE = re.compile(rf"(?P<kw>{_trie(_BEFORE_KW_WORDS)}){_BEFORE_KW_END}", re.I | re.M)
# read back from the keyword: the value, a link, a determiner and up to three words
_BEFORE_LINK_RE = re.compile(
    r"(?:^|(?<=[\s\"'`“‘(]))(?P<v>[^\s\"'`“”‘’<>()\[\]{}]{3,64})[\"'`”’]?"
    r"[ \t]*(?:(?:[ \t](?:is|was)|=)[ \t]+(?:(?:the|my|our|your|his|her|their|its)[ \t]+)?"
    r"|=[ \t]*|(?:→|->|—|–)[ \t]*(?:(?:that'?s|that’s|it'?s|it’s)[ \t]+)?"
    r"(?:(?:the|my|our|your|his|her|their)[ \t]+)?)"
    r"(?P<gap>(?:[\w'’-]{1,24}[ \t]+){0,3})\Z",
    re.I | re.M,
)
_NOT_BEFORE_GAP = frozenset(
    _words("""most common worst weakest popular typical example sample famous classic obvious
    bad terrible dumbest stupidest top same wrong right first last second only one""")
)
_CLAUSE_OPEN_RE = re.compile(
    r"(?:^|[.!?;:,(—–-]|\b(?:and|but|so|ok|okay|btw|yes|yeah|oh|also|fyi|and|then|nb))[ \t]*"
    r"[\"'`“‘]?\Z",
    re.I | re.M,
)


def _before_kw_span(m: re.Match[str]) -> Span | None:
    text = m.string
    if m.start() == 0 or text[m.start() - 1] not in " \t":
        return None
    line = text.rfind("\n", 0, m.start()) + 1
    v = _BEFORE_LINK_RE.search(text, max(line, m.start() - 160), m.start())
    if v is None:
        return None
    start, end = v.span("v")
    if not _CLAUSE_OPEN_RE.search(text, max(0, start - 12), start):
        return None
    gap = [w.lower() for w in v.group("gap").split()]
    kw = m.group("kw").lower()
    if any(w in _NOT_BEFORE_GAP or w in _CLAUSE_WORDS or w in _NOT_A_HOLDER for w in gap):
        return None
    if any(w in _NOT_SECRET_CODES for w in gap):
        return None  # `90210 is the zip code`, `404 is the error code`
    end = _trim(text, start, end)
    value = text[start:end]
    if "=" in text[end : m.start()] and _IDENT_RE.fullmatch(value):
        return None  # `tmp1 = passcode`: a variable given another's value
    code = bool(_NUMERIC_KW.fullmatch(kw)) or kw in _LOCK_ALONE or kw in _PLAIN_CODES
    if kw in _PLAIN_CODES or kw in _LOCK_ALONE:
        hi = text.find("\n", m.end())
        hi = min(len(text) if hi < 0 else hi, m.end() + 40)
        if not _LOCK_NOUN_RE.search(text, v.end("v"), hi):
            return None  # `4590 is the code`: of what?
    if code and _CODE_VALUE_RE.fullmatch(value):
        return start, end
    if kw in _LOCK_CODE_WORDS and kw not in _STRONG_WORDS:
        return None
    if kw in _LOOSE_WORDS or kw in _NETWORK_WORDS:
        return (start, end) if _password_like(value) else None
    ok = _credential_like(value, True) and not _YEAR_RE.fullmatch(value)
    return (start, end) if ok and not _MEASURE_RE.fullmatch(value) else None


# A password spelt out, as a voice message or a phone call writes it: single letters
# (`capital T`, `h as in hotel`), digits and digit words, a symbol's name, at least four
# of them: `capital T, o, r, c, h, seven, seven`, `K 9 R 2 W 7`, `kilo seven mike two`.
_NATO = (
    "alpha|alfa|bravo|charlie|delta|echo|foxtrot|golf|hotel|india|juliet|juliett|kilo|lima"
    "|mike|november|oscar|papa|quebec|romeo|sierra|tango|uniform|victor|whiskey|whisky|x-ray"
    "|xray|yankee|zulu"
)
_SPELLED_TOKEN = (
    r"(?:(?:capital|cap|big|upper[ -]?case|small|lower[ -]?case)[ \t]+)?[A-Za-z]"
    r"(?:[ \t]+as[ \t]+in[ \t]+[A-Za-z]+)?(?![\w'’-])"
    rf"|(?:(?:double|triple)[ \t]+)?(?:{_DIGIT_WORDS}|\d)(?![\w'’-])"
    rf"|(?:{_NATO})(?![\w-])"
    r"|(?:dash|hyphen|underscore|dot|period|at|hash|star|asterisk|ampersand|space|slash"
    r"|dollar(?:[ \t]+sign)?|exclamation(?:[ \t]+(?:mark|point))?|question[ \t]+mark)(?![\w-])"
)
_SPELLED_RE = re.compile(
    rf"(?i:{_SPELLED_TOKEN})(?:(?:[ \t]*,[ \t]*|[ \t]+(?:and[ \t]+(?:then[ \t]+)?)?|[ \t]*-[ \t]*)"
    rf"(?i:{_SPELLED_TOKEN})){{3,31}}"
)


_SPELT_WORD_RE = re.compile(rf"{_NATO}|{_DIGIT_WORDS}|\d")


def _spelled_value(text: str, pos: int) -> Span | None:
    m = _SPELLED_RE.match(text, pos)
    if m is None:
        return None
    tokens = re.split(r"[ \t,]+", m.group().lower())
    spelt = sum(
        (len(t) == 1 and t not in ("a", "i")) or bool(_SPELT_WORD_RE.fullmatch(t)) for t in tokens
    )
    if spelt < 2:
        return None  # a sentence's words: `the password is a mess, I think`
    return m.span()


# Codes listed under a plural heading, each after what it opens or whose it is: `Codes:
# front door 2203, garage 7788`, `PINs — Emma's tablet 1205, Noah's tablet 0311`. The
# first entry here; the others as a list of codes (`continued_codes`).
_CODE_LIST_HEADS = _words("""codes pins passcodes combinations combos codici códigos codigos
kody pincodes combinaisons combinaciones lockers padlocks locks safes keypads lockboxes""")
_CODE_LIST_RE = re.compile(
    rf"(?P<kw>{_trie(_CODE_LIST_HEADS)})"
    r"[ \t]*(?::|—|–|-)[ \t]*(?:\n[ \t]*(?:[-*•][ \t]+)?)?"
    r"(?P<label>(?:[^\W\d_][\w'’.-]*[ \t]+){1,3}?)(?:is[ \t]+|=[ \t]*|:[ \t]*|-[ \t]+)?"
    r"(?P<v>\d{3,8}|\d{1,3}(?:-\d{1,3}){2,4})(?=[ \t]*(?:[,;.)\n]|$|and\b|\())",
    re.I,
)


def _code_list_span(m: re.Match[str]) -> Span | None:
    text = m.string
    if m.start() > 0 and text[m.start() - 1].isalnum():
        return None
    before = text[max(0, m.start() - 24) : m.start()].split()
    if before and before[-1].lower().strip(".,:;") in _NOT_SECRET_CODES:
        return None  # `zip codes: Boston 02118`
    kw = m.group("kw").lower()
    lock = before and before[-1].lower().strip("-") in (*_LOCK_ALONE, "pin", "access", "entry")
    if kw.startswith(("pin", "passcode", "locker", "padlock", "lock", "safe", "keypad")) or lock:
        return m.span("v")
    line_end = text.find("\n", m.end())
    hi = len(text) if line_end < 0 else line_end
    if not _LOCK_NOUN_RE.search(text, m.start("label"), max(hi, m.end())):
        return None  # `Codes: HTTP 404, …`: codes of no lock
    return m.span("v")


# A CSV or semicolon or tab separated table whose header names a password column: each
# row's field in it (`name,username,password⏎Gmail,kate@…,Inbox&Zero9`).
_CSV_NAME_RE = re.compile(r"[^\W\d_][\w /'’-]{0,29}")
_CSV_FIELD_RE = re.compile(r"[ \t]*(?:\"((?:[^\"]|\"\")*)\"|([^,;\t\n\"]*))[ \t]*")
_CSV_KEYWORDS = (
    *_words("""password passwd pass pwd pw passcode pin passwort kennwort contraseña clave senha
    wachtwoord hasło haslo parola mdp secret"""),
    "mot de passe",
    "pin code",
)
_CSV_KW_RE = re.compile(rf"{_trie(_CSV_KEYWORDS)}(?=\"?[ \t]*(?:[,;\t\r\n]|\Z))")


def _csv_fields(line: str, sep: str) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    at = 0
    while True:
        f = _CSV_FIELD_RE.match(line, at)
        if f is None:
            return out
        g = 1 if f.group(1) is not None else 2
        out.append(f.span(g))
        at = f.end()
        if at >= len(line) or line[at] != sep:
            return out
        at += 1


def _csv_spans(m: re.Match[str]) -> list[Span] | None:
    text = m.string
    line_start = text.rfind("\n", 0, m.start()) + 1
    line_end = text.find("\n", m.end())
    head = text[line_start : len(text) if line_end < 0 else line_end]
    before = text[line_start : m.start()].rstrip(' \t"')
    if (before and before[-1] not in ",;\t") or line_end < 0:
        return None
    sep = max(",;\t", key=head.count)
    fields = _csv_fields(head, sep)
    if len(fields) < 2:
        return None
    names = [head[a:b].strip().lower() for a, b in fields]
    if not all(_CSV_NAME_RE.fullmatch(n) for n in names):
        return None  # a header names each column: not code (`self.user, self.passwd = …`)
    column = next((i for i, n in enumerate(names) if n in _CSV_KEYWORDS), None)
    if column is None:
        return None
    out: list[Span] = []
    pos = line_end + 1
    while pos < len(text):
        nl = text.find("\n", pos)
        line_end = len(text) if nl < 0 else nl
        line = text[pos:line_end]
        row = _csv_fields(line, sep)
        if len(row) != len(fields):
            break
        a, b = row[column]
        value = line[a:b].strip()
        if value and " " not in value and not _is_placeholder(value) and value != "-":
            out.append((pos + a, pos + b))
        pos = line_end + 1
    return out or None


# Where a keyword ends a clause, a header's field or a heading, the rules above that read
# back or down from it share one scan: each is tried where its own pattern matches.
_KW_END_WORDS = frozenset((*_BEFORE_KW_WORDS, *_CSV_KEYWORDS, *_CODE_LIST_HEADS))
_KW_END_SEEK = re.compile(
    rf"{_trie(_KW_END_WORDS)}(?![\w-])(?=\"?[ \t]*(?:$|[.,;:!?)(\n\t—–-]|[ \t]+[a-z]))", re.M
)
_CSV_KW_I_RE = re.compile(_CSV_KW_RE.pattern, re.I)


def _kw_end_spans(m: re.Match[str]) -> list[Span] | None:
    text, pos = m.string, m.start()
    out: list[Span] = []
    for regex, find in (
        (_BEFORE_KW_RE, _before_kw_span),
        (_CODE_LIST_RE, _code_list_span),
        (_CSV_KW_I_RE, _csv_spans),
    ):
        hit = regex.match(text, pos)
        if hit is None:
            continue
        found = find(hit)
        if isinstance(found, list):
            out += found
        elif found is not None:
            out.append(found)
    return out or None


# A password a login or a lock takes, right after the verb: `tried logging in with
# Pumpkin2019`, `log in as admin with Grafana-View-7`, `the laptop unlocks with Crumpet77`,
# `buzz yourself in with 2716`. Not a way of signing in (`with Google`, `with Auth0`): a
# word needs two digits or a symbol.
_LOGIN_WITH_RE = re.compile(
    r"(?:log(?:s|ged|ging)?[ \t-]?(?:in|on)|sign(?:s|ed|ing)?[ \t-]?(?:in|on)"
    r"|unlock(?:s|ed|ing)?|(?:get|got|getting)[ \t]+in"
    r"|(?:buzz(?:es|ed)?|let)(?:[ \t]+(?:yourself|yourselves|me|us|them|him|her))?[ \t]+in)"
    r"(?:[ \t]+(?:as|to|on|at|is)[ \t]+[^\s,;]{1,40}?)?(?:[ \t]+(?:now|then|just|first))?"
    r"[ \t]+(?:with|using)[ \t]+(?P<q>[\"'`“]?)(?P<s>[^\s\"'`”]{4,64})",
    re.I,
)


def _login_with_span(m: re.Match[str]) -> Span | None:
    text = m.string
    if m.start() > 0 and text[m.start() - 1].isalnum():
        return None
    start = m.start("s")
    end = _trim(text, start, m.end("s"))
    value = text[start:end]
    if value.isdigit():
        return (start, end) if 4 <= len(value) <= 8 and not _glued(text, end) else None
    digits = sum(c.isdigit() for c in value)
    symbol = any(c in "!#$&*?@%+=" for c in value)
    shaped = len(value) >= 8 and _password_like(value)  # `Grafana-View-7`, not `OAuth2`
    if not (digits >= 2 or symbol or shaped) or not any(c.isalpha() for c in value):
        return None
    if len(value) < 6:
        return None
    if "@" in value[1:-1] or _CRED_NOT_RE.fullmatch(value) or _is_placeholder(value):
        return None  # an address, a product, a placeholder
    return start, end


BUILTIN += [
    *(
        Detector(
            "password_assignment", re.compile(cmd + _TOOL_VALUE), (anchor,), _tool_flag_span, 8
        )
        for anchor, cmd in _TOOL_FLAGS
    ),
    Detector(
        "password_assignment",
        _NAMED_LITERAL_RE,
        ("pass", "pwd", "secret", "token", "key"),
        _named_literal_span,
        8,
        fold=True,
        seek=re.compile(r"[\"'][ \t]*,[ \t]*[\"']"),
    ),
    Detector("password_assignment", _PGPASS_RE, (":",), _pgpass_span, 8),
    # the value before its keyword, a list of codes, a CSV column: one scan for the three
    Detector(
        "keyword_secret",
        re.compile(_KW_END_SEEK.pattern, re.I | re.M),
        (),
        _kw_end_spans,
        9,
        fold=True,
        seek=_KW_END_SEEK,
    ),
    Detector(
        "keyword_secret",
        _LOGIN_WITH_RE,
        (" with ", " using "),
        _login_with_span,
        9,
        fold=True,
        seek=re.compile(r"(?:log|sign|unlock|get|got|buzz|let)"),
    ),
]


# What is keyed in where a password, a login, a network or a code was named earlier in the
# sentence: `if it asks for a password just put in marmalade`, `to get onto the guest
# network use welcome2visitors`, `it wants the wifi thing, try bluebird88`. A word with
# letters and digits, digits after a PIN or a lock, or a small word that ends the clause
# after a password's name; not `use the one on the card`, `try again later`.
_PUT_IN_RE = re.compile(
    r"[ \t](?:put(?:[ \t]+in)?|type|enter|use|try|punch[ \t]+in|key[ \t]+in|go[ \t]+with)"
    r"[ \t]+(?P<q>[\"'`“‘]?)(?P<s>[^\s\"'`”’,;()]{4,40})(?P=q)",
    re.I,
)
_PUT_IN_CONTEXT_RE = re.compile(
    r"(?<![\w-])(?:pass(?:word|wort|code|phrase)s?|pw|pwd|wi-?fi|network|log[ -]?ins?"
    r"|sign[ -]?ins?|pin|code|combination|combo|keypad|lockbox|alarm)(?![\w-])",
    re.I,
)
_PUT_IN_WORD_END_RE = re.compile(
    r"[ \t]*(?:[,.;!?]|$|\n|[ \t]+(?:and|then|instead|lol|haha|for[ \t]+(?:it|that|now)))",
    re.I | re.M,
)
_NOT_PUT_IN = frozenset(
    _words("""again later that this it them one ones yours mine something anything instead
    everything anyway same usual default normal both either mobile phone email enter return
    backspace space shift delete caps google apple facebook microsoft sso password passwords""")
)


def _put_in_span(m: re.Match[str]) -> Span | None:
    text = m.string
    start = m.start("s")
    end = _trim(text, start, m.end("s"))
    value = text[start:end]
    if end - start < 4 or _is_placeholder(value):
        return None
    low = value.lower()
    digits = any(c.isdigit() for c in value)
    if value.isdigit():
        if not 4 <= len(value) <= 8 or _glued(text, end):
            return None
    elif digits:
        if sum(c.isalpha() for c in value) < 3 or _CRED_NOT_RE.fullmatch(value):
            return None
        if _CRED_NOT_SHAPE_RE.search(value) or _MEASURE_RE.fullmatch(value) or "@" in value:
            return None
    elif (
        not value.isalpha()
        or not value.islower()
        or low in _NOT_PUT_IN
        or low in _DESCRIBING
        or low in _PHRASE_STOP
        or low in _NOT_ANSWERS
        or _KW_WORD_RE.match(low)
        or low.endswith(_DESCRIBING_ENDS)
        or not _PUT_IN_WORD_END_RE.match(text, end)
    ):
        return None
    stops = list(_SENTENCE_STOP_RE.finditer(text, max(0, m.start() - 120), m.start()))
    lo = stops[-1].end() if stops else max(0, m.start() - 120)
    context = _PUT_IN_CONTEXT_RE.search(text, lo, m.start())
    if context is None:
        return None
    line = text.rfind("\n", 0, m.start()) + 1
    line_end = text.find("\n", end)
    if _CODE_LINE_RE.search(text, line, len(text) if line_end < 0 else line_end):
        return None  # a line of code: `type substitution` near `_jit_pass_…`
    said = context.group().lower()
    numeric = said in ("pin", "code", "combination", "combo", "keypad", "lockbox", "alarm")
    if value.isdigit():
        return (start, end) if numeric else None
    if numeric and said != "pin":
        return None  # `the code is in the wiki, use Chrome2`: a code is digits
    if said.startswith(("log", "sign", "network")):
        # a small word after a login's name is its user as often, and a product's name
        # has a digit (`use Chrome2`): a password here is long or has two digits
        n = sum(c.isdigit() for c in value)
        if not digits or (n < 2 and len(value) < 10):
            return None
    return start, end


_KW_WORD_RE = re.compile(r"pass|pw|pin|code|key|login|user")

BUILTIN += [
    Detector(
        "keyword_secret",
        _PUT_IN_RE,
        (
            "pass",
            "pw",
            "pin ",
            "pin,",
            "pin?",
            "pin.",
            "wifi",
            "wi-fi",
            "login",
            "log in",
            "sign in",
            "sign-in",
            "network",
            "combo",
            "alarm",
            "keypad",
            "lockbox",
        ),
        _put_in_span,
        11,
        fold=True,
        seek=re.compile(r"[ \t](?:put|type|enter|use|try|punch|key|go with)[ \t]"),
        prose=True,
    ),
]


# ---- the first part of a provider token at the very end of a text ----------------------
# Two `>>` appends can cut a token in two, and the first part is stored, versioned and
# indexed before the second arrives: only the whole token matches its detector above. A
# content text that ends with a provider's prefix and the start of a body is taken as such
# a cut, and that part is redacted at once; the rest, glued to the marker when it comes,
# is removed as the marker's continuation (`memory.redact`), so no copy ever holds a piece.
# Only at the very end of a text (no newline, no full stop after it): a token quoted in a
# sentence is matched whole or not at all. Not for names, which are never cut.
_CUT_WINDOW = 320
_CUT = (
    ("github_token", r"gh[pousr]_" + _lb(4), r"[A-Za-z0-9]{1,250}"),
    ("github_token", "github_pat_" + _lb(11), r"[A-Za-z0-9_]{1,250}"),
    (
        "gitlab_token",
        "gl" + _lb(2) + r"(?:pat|ptt|dt|rt|cbt|oas|ft|agent|soat|imt)-",
        r"[A-Za-z0-9_.-]{1,250}",
    ),
    ("anthropic_key", "sk-ant-" + _lb(7), r"[A-Za-z0-9_-]{1,250}"),
    ("openai_key", "sk-" + _lb(3) + "(?!ant-)", r"[A-Za-z0-9_-]{1,250}"),
    ("aws_access_key", "(?:AKIA|ASIA)" + _lb(4, "A-Za-z0-9"), r"[A-Z0-9]{1,15}"),
    ("jwt", "eyJ" + _lb(3), r"[A-Za-z0-9_-]{2,}(?:\.[A-Za-z0-9_-]*){0,2}"),
    ("slack_token", rf"(?:xox{_lb(3)}[abposr]-|xapp-{_lb(5)})", r"[A-Za-z0-9-]{1,250}"),
    (
        "stripe_key",
        rf"(?:(?:sk|rk|pk)_{_lb(3)}(?:live|test)_|whsec_{_lb(6)})",
        r"[A-Za-z0-9]{1,250}",
    ),
    ("google_api_key", "AIza" + _lb(4), r"[0-9A-Za-z_-]{1,34}"),
    ("google_oauth_secret", "GOCSPX-" + _lb(7), r"[A-Za-z0-9_-]{1,250}"),
    ("google_oauth_token", r"ya29\." + _lb(5), r"[A-Za-z0-9_-]{1,250}"),
    ("huggingface_token", "hf_" + _lb(3), r"[A-Za-z]{1,250}"),
    ("npm_token", "npm_" + _lb(4), r"[A-Za-z0-9]{1,35}"),
    ("pypi_token", "pypi-" + _lb(5), r"Ag[A-Za-z0-9_-]{0,250}"),
    ("sendgrid_key", r"SG\." + _lb(3), r"[A-Za-z0-9_-]{4,22}(?:\.[A-Za-z0-9_-]{0,43})?"),
    (
        "slack_webhook",
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/",
        r"[A-Za-z0-9_/-]{1,250}",
    ),
)
_OPENAI_PROJECT_RE = re.compile(r"(?:proj|svcacct|admin)-")


def _randomish(body: str) -> bool:
    return len(body) >= 8 or any(c.isdigit() or c.isupper() for c in body)


# What a cut body must look like already, so that a text ending in `sk-learn`, `hf_hub`
# or `ASIAN` is not taken for one: by default a digit or a capital, or 8 characters.
_CUT_CHECKS: dict[str, Callable[[str, str], bool]] = {
    "openai_key": lambda _, b: _randomish(b) or bool(_OPENAI_PROJECT_RE.match(b)),
    "aws_access_key": lambda m, b: m.startswith("AKIA") or any(c.isdigit() for c in b),
    "huggingface_token": lambda _, b: _upper_and_lower(b),
    "sendgrid_key": lambda _, b: _mixed(b),
}


def _cut_span(kind: str) -> Callable[[re.Match[str]], Span | None]:
    check = _CUT_CHECKS.get(kind, lambda _, b: _randomish(b))
    whole = kind != "slack_webhook"  # a webhook's secret is its path, as above

    def span(m: re.Match[str]) -> Span | None:
        if not check(m.group(), m.group("b")):
            return None
        return m.span() if whole else m.span("b")

    return span


# Whether a text can end in a cut token at all: one search of its end instead of one per
# detector (most texts end in a word, a full stop or a newline).
CUT_GATE = re.compile(
    r"(?:gh[pousr]_|github_pat_|gl[a-z]{2,5}-|sk-|AKIA|ASIA|eyJ|xox[abposr]-|xapp-|_live_"
    r"|_test_|whsec_|AIza|GOCSPX-|ya29\.|hf_|npm_|pypi-|SG\.|hooks\.slack\.com/)"
    r"[A-Za-z0-9_./-]*\Z"
)
CUT_TOKENS: list[Detector] = [
    Detector(
        kind, re.compile(rf"{prefix}(?P<b>{body})\Z"), (), _cut_span(kind), 1, tail=_CUT_WINDOW
    )
    for kind, prefix, body in _CUT
]
BUILTIN += CUT_TOKENS

BUILTIN_KINDS: frozenset[str] = frozenset(d.kind for d in BUILTIN)
