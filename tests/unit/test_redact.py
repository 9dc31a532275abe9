"""Secret redaction: every kind caught in context, nothing else touched, idempotent, fast.

The fake secrets are assembled from pieces so that this file does not itself look like a
leaked credential to a repository scanner.
"""

from __future__ import annotations

import json
import logging
import random
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfs.errors import InvalidInput
from contextfs.memory.redact import (
    BUILTIN_KINDS,
    RedactingFilter,
    Redaction,
    Redactor,
    RedactResult,
    escape_controls,
    fitted_replacement,
    marker,
    replacement,
    secret_filename_reason,
)

R = Redactor()

# Format-valid fakes, one per kind.
OPENAI_LEGACY = "sk-" + "Ab3dE5fG7hJ9kL1mN3pQ" + "T3BlbkFJ" + "xY3zA5bC7dE9fG1hJ3kL"
OPENAI_PROJ = "sk-" + "proj-" + "Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ_3kL-5mN7pQ9rS1tU3v"
OPENAI_SVC = "sk-" + "svcacct-" + "Zq8Wx7Ec6Rv5Tb4Yn3Um2Ik1Ol0Pa9Sd8Fg7Hj6Kl5Zx4Cv3Bn2"
ANTHROPIC = (
    "sk-"
    + "ant-api03-"
    + "Xy7_Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5mN7-pQ9rS1tU3vW5"
    + "AA"
)
AWS_ID = "AKIA" + "Z7QX4N2M8P5R3T6W"
AWS_STS_ID = "ASIA" + "Q2W3E4R5T6Y7U8I9"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYzq8Wx7Ec6R"
GITHUB_CLASSIC = "ghp" + "_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
GITHUB_OAUTH = "gho" + "_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
GITHUB_FINE = (
    "github"
    + "_pat_"
    + "11ABCDEFG0123456789abc_"
    + "Xy7Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5mN7pQ9"
)
GITLAB = "glpat" + "-" + "Xy7Ab3dE5fG7hJ9kL1mN"
SLACK_BOT = "xoxb" + "-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
SLACK_USER = (
    "xoxp" + "-" + "123456789012-123456789012-123456789012-0123456789abcdef0123456789abcdef"
)
SLACK_HOOK_PATH = "T01ABCDEF" + "/B02GHIJKL/" + "Xy7Ab3dE5fG7hJ9kL1mN3pQ5"
SLACK_HOOK = "https://hooks.slack.com/services/" + SLACK_HOOK_PATH
STRIPE_LIVE = "sk" + "_live_" + "51HxYzAbCdEfGhIjKlMnOpQrStUv"
STRIPE_RESTRICTED = "rk" + "_test_" + "4eC39HqLyjWDarjtT1zdp7dc"
GOOGLE = "AIza" + "SyD-" + "Xy7Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9v"
JWT = (
    "eyJ"
    + "hbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    + ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = (
    "-----BEGIN RSA " + "PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAx7Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1h\n"
    "J3kL5mN7pQ9rS1tU3vW5xY7zA9bC1dE3fG5hJ7kL9mN1pQ3rS5tU7vW9xY1zA3bC\n"
    "-----END RSA " + "PRIVATE KEY-----"
)
OPENSSH = (
    "-----BEGIN OPENSSH " + "PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACBxY3zA5bC7dE9fG1hJ3kL5mN7pQ9rS1tU3vW5xY7zA9bAAAAJgAAAAA\n"
    "-----END OPENSSH " + "PRIVATE KEY-----"
)

TOKENS = [
    ("openai_key", OPENAI_LEGACY),
    ("openai_key", OPENAI_PROJ),
    ("openai_key", OPENAI_SVC),
    ("anthropic_key", ANTHROPIC),
    ("aws_access_key", AWS_ID),
    ("aws_access_key", AWS_STS_ID),
    ("github_token", GITHUB_CLASSIC),
    ("github_token", GITHUB_OAUTH),
    ("github_token", GITHUB_FINE),
    ("gitlab_token", GITLAB),
    ("slack_token", SLACK_BOT),
    ("slack_token", SLACK_USER),
    ("stripe_key", STRIPE_LIVE),
    ("stripe_key", STRIPE_RESTRICTED),
    ("google_api_key", GOOGLE),
    ("jwt", JWT),
]

TOKEN_IDS = [f"{kind}-{i}" for i, (kind, _) in enumerate(TOKENS)]

# Where a bare token shows up: `{s}` is the secret, everything else must survive.
TOKEN_CONTEXTS = {
    "prose": "Here is the key I used yesterday: {s} — rotate it after the demo.\n",
    "json": '{{"name": "prod", "credential": "{s}", "enabled": true}}',
    "yaml": "service:\n  region: eu-west-1\n  credential: {s}\n  retries: 3\n",
    "env": "APP_ENV=production\nSERVICE_CREDENTIAL={s}\nDEBUG=false\n",
    "shell": "  512  curl -s https://api.example.com/v1/models -H 'X-Auth: {s}' | jq .\n",
    "python": 'client = Client(credential="{s}", timeout=30)\n',
    "markdown": "Set it:\n\n```bash\nexport SERVICE_CREDENTIAL={s}\n```\n\nThen run it.\n",
    "transcript": '{{"role": "user", "content": "my key is {s}, why 401?", "id": "m1"}}\n',
    "bearer": "curl -H 'Authorization: Bearer {s}' https://api.example.com\n",
    "url_query": "GET https://api.example.com/v1/things?key={s}&page=2 HTTP/1.1\n",
}


def redact_one(text: str, secret: str, kind: str) -> RedactResult:
    """Redact `text`, which holds `secret` once, and check the result precisely."""
    res = R.redact(text)
    start = text.index(secret)
    assert res.text == text.replace(secret, marker(kind)), res.text
    assert res.redactions == (
        Redaction(kind, start, start + len(secret), text.count("\n", 0, start) + 1),
    )
    assert secret not in res.text
    return res


@pytest.mark.parametrize("context", sorted(TOKEN_CONTEXTS))
@pytest.mark.parametrize(("kind", "secret"), TOKENS, ids=TOKEN_IDS)
def test_token_caught_in_context(kind: str, secret: str, context: str) -> None:
    redact_one(TOKEN_CONTEXTS[context].format(s=secret), secret, kind)


@pytest.mark.parametrize(("kind", "secret"), TOKENS, ids=TOKEN_IDS)
def test_token_in_assignment_keeps_specific_kind(kind: str, secret: str) -> None:
    # The provider detector wins over the generic `api_key=` one.
    for text in (
        f'api_key = "{secret}"\n',
        f"OPENAI_API_KEY={secret}\n",
        f'{{"access_token": "{secret}"}}',
        f"token: {secret}\n",
        f"--token {secret}\n",
    ):
        redact_one(text, secret, kind)


def test_transcript_line_round_trips_as_json() -> None:
    line = json.dumps(
        {"role": "tool", "name": "bash", "input": f"echo {GITHUB_CLASSIC}", "output": JWT}
    )
    res = R.redact(line)
    assert res.summary() == {"github_token": 1, "jwt": 1}
    event = json.loads(res.text)
    assert event["input"] == "echo [REDACTED:github_token]"
    assert event["output"] == "[REDACTED:jwt]"


@pytest.mark.parametrize(
    "template",
    [
        "[default]\naws_access_key_id = AKIAZ7QX4N2M8P5R3T6W\naws_secret_access_key = {s}\n",
        "AWS_SECRET_ACCESS_KEY={s}\n",
        'export AWS_SECRET_ACCESS_KEY="{s}"\n',
        '{{"Credentials": {{"AccessKeyId": "ASIA", "SecretAccessKey": "{s}"}}}}',
        "aws_secret_access_key: {s}\n",
        "boto3.client('s3', aws_secret_access_key='{s}')\n",
        "$ aws configure set aws_secret_access_key {s}\n",
    ],
)
def test_aws_secret_key_next_to_its_name(template: str) -> None:
    text = template.format(s=AWS_SECRET)
    res = R.redact(text)
    assert AWS_SECRET not in res.text
    assert "aws_secret_key" in res.summary()
    start = text.index(AWS_SECRET)
    assert Redaction("aws_secret_key", start, start + 40, text.count("\n", 0, start) + 1) in (
        res.redactions
    )


def test_aws_secret_shaped_string_alone_is_left() -> None:
    # 40 base64-ish characters are only a secret next to the name that says so.
    text = f"checksum {AWS_SECRET} ok\n"
    assert R.redact(text).text == text


@pytest.mark.parametrize("block", [PEM, OPENSSH])
@pytest.mark.parametrize(
    "template",
    [
        "{s}\n",
        "My deploy key, keep it secret:\n\n```\n{s}\n```\n\nAnd that is it.\n",
        "prefix text {s} suffix text",
    ],
)
def test_private_key_block_replaced_whole(block: str, template: str) -> None:
    redact_one(template.format(s=block), block, "private_key")


def test_private_key_in_json_with_escaped_newlines() -> None:
    service_account = {
        "type": "service_account",
        "private_key_id": "1234",
        "private_key": PEM + "\n",
        "client_email": "bot@example.iam.gserviceaccount.com",
    }
    text = json.dumps(service_account, indent=2)
    res = R.redact(text)
    assert res.summary() == {"private_key": 1}
    loaded = json.loads(res.text)
    assert loaded["private_key"] == "[REDACTED:private_key]\n"
    assert loaded["client_email"] == service_account["client_email"]


def test_private_key_in_yaml_block_scalar() -> None:
    indented = "\n".join("    " + line for line in PEM.splitlines())
    text = f"tls:\n  key: |\n{indented}\n  cert: cert.pem\n"
    res = R.redact(text)
    assert res.text == "tls:\n  key: |\n    [REDACTED:private_key]\n  cert: cert.pem\n"


def test_truncated_private_key_is_still_removed() -> None:
    cut = "\n".join(PEM.splitlines()[:2])
    text = f"the log says:\n{cut}"
    res = R.redact(text)
    assert res.text == "the log says:\n[REDACTED:private_key]"


def test_public_key_block_is_left() -> None:
    text = "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOC\n-----END PUBLIC KEY-----\n"
    cert = "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTAN\n-----END CERTIFICATE-----\n"
    assert R.redact(text + cert).text == text + cert


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("DATABASE_URL=postgres://app:Zq8-Wx7Ec@db.internal:5432/app\n", "Zq8-Wx7Ec"),
        ("https://bob:s3cret@example.com", "s3cret"),
        ("git remote add origin https://alice:tok3n9XyZ@github.com/alice/repo.git", "tok3n9XyZ"),
        ('{"broker": "amqp://guest:Gu3st!pw@rabbit:5672/"}', "Gu3st!pw"),
        ("redis_url = 'redis://:r3d1s@cache:6379/0'\n", "r3d1s"),
        ("connect with mongodb+srv://admin:p@ss:w0rd@cluster0.example.net/db today", "p@ss:w0rd"),
        ("```\nmysql://root:r00tpw@127.0.0.1/\n```\n", "r00tpw"),
    ],
)
def test_url_password(text: str, secret: str) -> None:
    res = redact_one(text, secret, "url_password")
    assert "@" in res.text  # user and host stay


def test_url_password_exact_example() -> None:
    assert (
        R.redact("https://bob:s3cret@example.com").text
        == "https://bob:[REDACTED:url_password]@example.com"
    )


@pytest.mark.parametrize(
    "text",
    [
        "postgres://user:${DB_PASSWORD}@localhost/db",
        "postgres://user:<password>@localhost/db",
        "https://user:****@example.com",
        "https://user:password@example.com",
        "ssh://git@github.com:22/owner/repo.git",
        "http://localhost:8080/path?x=1",
        "git@github.com:owner/repo.git",
        "http://[::1]:8000/",
    ],
)
def test_url_without_real_password_is_left(text: str) -> None:
    assert R.redact(text).text == text


def test_slack_webhook_keeps_host() -> None:
    for text in (
        f"SLACK_WEBHOOK_URL={SLACK_HOOK}\n",
        f'requests.post("{SLACK_HOOK}", json=payload)\n',
        f"posting to {SLACK_HOOK} now",
    ):
        res = redact_one(text, SLACK_HOOK_PATH, "slack_webhook")
        assert "https://hooks.slack.com/services/[REDACTED:slack_webhook]" in res.text


PW = "hunter2-Xy9"


@pytest.mark.parametrize(
    "template",
    [
        "password={v}",
        "DB_PASSWORD={v}\nDB_USER=app\n",
        "export MYSQL_ROOT_PASSWORD='{v}'\n",
        "database:\n  user: app\n  password: {v}\n  host: db\n",
        "passwd: {v}  # rotated monthly\n",
        '{{"username": "bob", "password": "{v}"}}',
        '{{"username":"bob","Password":"{v}"}}',
        "conn = psycopg.connect(host='db', password='{v}', dbname='app')\n",
        'pwd = "{v}"\n',
        "[client]\nuser = root\npassword = {v}\n",
        "$ mysql -u root --password {v} -h db\n",
        "$ mysql -u root --password={v} -h db\n",
        "$ PGPASSWORD={v} psql -h db -U app\n",
        "GET /login?user=bob&password={v}&next=/ HTTP/1.1\n",
        "secret: {v}\n",
        "client_secret={v}\n",
        "api_key={v}\n",
        "apikey: {v}\n",
        "access_token: {v}\n",
        "token={v}\n",
        "X-Api-Key: {v}\n",
        "const config = {{ apiKey: '{v}', region: 'eu' }};\n",
        "SECRET_KEY = '{v}'\n",
        "$config = ['password' => '{v}'];\n",
        "My password: {v}\n",
        '{{"role": "user", "content": "my .env has PASSWORD={v}\\nDEBUG=1"}}',
        '{{"role": "tool", "input": "{{\\"password\\": \\"{v}\\"}}"}}',
        "```ini\n[smtp]\npassword = {v}\n```\n",
    ],
)
def test_password_assignment(template: str) -> None:
    text = template.format(v=PW)
    res = redact_one(text, PW, "password_assignment")
    assert res.text.count("[REDACTED:password_assignment]") == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("My password: hunter2.", "My password: [REDACTED:password_assignment]."),
        ("**Password:** hunter2\n", "**Password:** [REDACTED:password_assignment]\n"),
        (
            "my password: hunter2, and my user: bob",
            "my password: [REDACTED:password_assignment], and my user: bob",
        ),
        (
            "curl -u admin:s3cret https://x",
            "curl -u admin:[REDACTED:password_assignment] https://x",
        ),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic [REDACTED:basic_auth]"),
        (
            "-H 'Authorization: Bearer 0a1b2c3d4e5f6a7b8c9d'",
            "-H 'Authorization: Bearer [REDACTED:bearer_token]'",
        ),
        (
            "database:\n  password: hunter\n",
            "database:\n  password: [REDACTED:password_assignment]\n",
        ),
    ],
)
def test_assignment_edge_forms(text: str, expected: str) -> None:
    assert R.redact(text).text == expected


def test_password_assignment_exact_example() -> None:
    assert R.redact("password=hunter2").text == "password=[REDACTED:password_assignment]"


def test_multiline_password_offsets_and_lines() -> None:
    text = "# config\nuser=bob\n\npassword=hunter2\nkey: " + GOOGLE + "\n"
    res = R.redact(text)
    assert res.text == (
        "# config\nuser=bob\n\npassword=[REDACTED:password_assignment]\n"
        "key: [REDACTED:google_api_key]\n"
    )
    pw, goog = res.redactions
    assert (pw.kind, pw.line, text[pw.start : pw.end]) == ("password_assignment", 4, "hunter2")
    assert (goog.kind, goog.line, text[goog.start : goog.end]) == ("google_api_key", 5, GOOGLE)
    assert res.changed
    assert res.summary() == {"password_assignment": 1, "google_api_key": 1}


def test_many_secrets_in_one_document() -> None:
    text = "\n".join(f"{i}: {s}" for i, (_, s) in enumerate(TOKENS)) + "\n" + PEM
    res = R.redact(text)
    for _, secret in TOKENS:
        assert secret not in res.text
    assert res.summary()["private_key"] == 1
    assert len(res.redactions) == len(TOKENS) + 1
    starts = [r.start for r in res.redactions]
    assert starts == sorted(starts)
    for r, line in zip(res.redactions, range(1, len(TOKENS) + 2), strict=True):
        assert r.line == line


# Ordinary prose and code, including near misses: none of it may change.
ORDINARY = r'''
# Meeting notes, 2024-03-14

We talked about the password reset flow. The password is never stored in clear; we keep a
salted hash. Reset your password: we send a link that expires after an hour. The token
in that link is single-use. Passwords must be at least 12 characters. Passwordless login
via passkeys is on the roadmap. Keep your secret santa gifts under $20. The API key page is
at Settings > API keys, and tokens: see the docs. Password: (see 1Password vault "Infra")
Nobody should ever paste an API key into chat.

TODO list: update the task-list component, finish the risk-assessment doc, and ask about
the desk-booking tool. We use sk-learn... I mean scikit-learn. The AKIA prefix is what an
AWS access key id starts with; OAKIAN is not a word. ASIAN markets opened higher.

Commit a94a8fe5ccb19ba61c4c0873d391e987982fbbd3 fixed it (short: a94a8fe). Request id
123e4567-e89b-12d3-a456-426614174000, trace 4bf92f3577b34da6a3ce929d0e0e4736, hex ff00ff.
Build sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08.
See https://example.com/docs/auth#tokens and http://localhost:8080/health?verbose=true,
git@github.com:owner/repo.git, ssh://deploy@host:2222/srv, mailto:bob@example.com.
![logo](data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==)
The bearer of bad news arrived. Authorization: see below.

```python
import getpass
import os

from settings import SECRET_KEY_PATH


def login(user: str, password: str, token: str | None = None) -> bool:
    """Log in.

    Args:
        password: The user's password, never logged.
        token: An optional session token from a previous login.
    """
    if password == "":
        raise ValueError("empty password")
    if token != previous_token:
        pass
    password = getpass.getpass()
    password = input("Password: ")
    api_key = os.environ["OPENAI_API_KEY"]
    api_key = os.getenv("OPENAI_API_KEY")
    secret = None
    token = None
    token = tokens[i]
    token = next(tokens)
    token = tok
    password = password.strip()
    secret_key = settings.SECRET_KEY
    access_token = response.json()["access_token"]
    max_tokens = 4096
    num_tokens: int = 0
    token_count = len(tokens)
    is_secret = False
    compass = "north"
    bypass = True
    passwordless = True
    client = OpenAI(api_key=api_key)
    session = connect(password=password, token=token)
    headers = {"Authorization": f"Bearer {token}"}
    token = f"{prefix}-{suffix}"
    password = ""
    password = ''
    secret = secrets.token_hex(32)
    return check(user, password=pw, api_key=key)
```

```typescript
interface Credentials { password: string; token?: string; apiKey: string | null }
const password = req.body.password;
const token = await getToken();
let secret = "";
const { password, ...rest } = user;
const opts = { token: token, password: password };
if (token === undefined) throw new Error("no token");
```

```yaml
kind: Secret
metadata:
  name: db-credentials
spec:
  secretName: db-tls
  passwordSecretRef: pg-password
env:
  - name: DB_PASSWORD
    valueFrom:
      secretKeyRef: {name: db, key: password}
  token: ${{ secrets.GITHUB_TOKEN }}
  password: "{{ vault_db_password }}"
  api_key: !vault |
```

```bash
export GITHUB_TOKEN=$(gh auth token)
export PASSWORD="${DB_PASSWORD}"
PWD=/home/alice/project
OLDPWD=/home/alice
password=<your password>
password=$DB_PASS
api_key=your-api-key-here
OPENAI_API_KEY=sk-...
docker login --password-stdin < token.txt
docker run -u 1000:1000 -e TOKEN="$TOKEN" image
git push -u origin main
git commit -m "rotate token" --no-verify
cat /etc/passwd: it is world readable
```

```sql
CREATE TABLE users (id INTEGER, password_hash TEXT NOT NULL, password VARCHAR(255));
SELECT * FROM tokens WHERE token = ? AND expires > now();
```

```ini
[auth]
password =
token = ""
secret = changeme
api_key = <api key>
```

<input type="password" name="password" placeholder="Password">
{"type": "password", "label": "Password:", "hint": "at least 12 characters"}
{"max_tokens": 256, "tokens": 1532, "token_type": "bearer", "secret_name": "prod"}
Already redacted: password=[REDACTED:password_assignment] and [REDACTED:openai_key].
'''


def test_no_false_positives_on_ordinary_text_and_code() -> None:
    res = R.redact(ORDINARY)
    found = [(r.kind, ORDINARY[r.start : r.end], r.line) for r in res.redactions]
    assert found == []
    assert res.text == ORDINARY
    assert not res.changed
    assert res.summary() == {}


def test_no_false_positives_on_own_source() -> None:
    import contextfs.memory.service as service

    source = Path(service.__file__).read_text(encoding="utf-8")
    assert R.redact(source).redactions == ()


# -------------------------------------------------------------------------- user patterns


def test_user_pattern_whole_match_and_group() -> None:
    r = Redactor({"employee_id": r"\bEMP-\d{6}\b", "acme_pin": r"pin:\s*(?P<secret>\d{4})"})
    res = r.redact("badge EMP-123456 and pin: 9876 and EMP-12 stays")
    assert res.text == (
        "badge [REDACTED:employee_id] and pin: [REDACTED:acme_pin] and EMP-12 stays"
    )
    assert [(x.kind, x.start, x.end) for x in res.redactions] == [
        ("employee_id", 6, 16),
        ("acme_pin", 26, 30),
    ]
    # The built-ins still run next to user patterns.
    assert r.redact(f"k={GITLAB}").text == "k=[REDACTED:gitlab_token]"


@pytest.mark.parametrize(
    ("patterns", "needle"),
    [
        ({"bad_regex": "(unclosed"}, "bad_regex"),
        ({"Bad-Name": r"\d+"}, "Bad-Name"),
        ({"": r"\d+"}, "''"),
        ({"empty_ok": r"\d*"}, "empty_ok"),
        ({"blank": ""}, "blank"),
        ({"jwt": r"tok\d+"}, "jwt"),
    ],
)
def test_user_pattern_validation(patterns: dict[str, str], needle: str) -> None:
    with pytest.raises(InvalidInput) as info:
        Redactor(patterns)
    assert needle in str(info.value)


def test_user_pattern_cannot_eat_markers() -> None:
    r = Redactor({"shouty": r"[A-Z]{5,}"})
    once = r.redact(f"DANGER zone, key {GOOGLE}")
    assert once.text == "[REDACTED:shouty] zone, key [REDACTED:google_api_key]"
    assert r.redact(once.text).text == once.text


def test_rescan_maps_offsets_back_to_the_original() -> None:
    # This user pattern only matches once a marker has been written (it needs a `]`):
    # the rescan finds it, and its offsets still point into the original text.
    r = Redactor({"bang": r"(?<=\])!"})
    text = f"a {JWT}! b"
    res = r.redact(text)
    assert res.text == "a [REDACTED:jwt][REDACTED:bang] b"
    assert [(x.kind, x.start, x.end) for x in res.redactions] == [
        ("jwt", 2, 2 + len(JWT)),
        ("bang", 2 + len(JWT), 3 + len(JWT)),
    ]
    assert r.redact(res.text).text == res.text


def test_marker_and_result_helpers() -> None:
    assert marker("jwt") == "[REDACTED:jwt]"
    res = R.redact("nothing here")
    assert res == RedactResult("nothing here", ())
    assert not res.changed
    assert {"openai_key", "password_assignment", "private_key", "jwt"} <= BUILTIN_KINDS


# ---------------------------------------------------------------------------- idempotence

FRAGMENTS = [s for _, s in TOKENS] + [
    PEM,
    AWS_SECRET,
    SLACK_HOOK,
    "https://bob:s3cret@example.com",
    "password=",
    "password: ",
    "--password ",
    '"password": "',
    "aws_secret_access_key = ",
    "Bearer ",
    "token=",
    "[REDACTED:jwt]",
    "[REDACTED:",
    "]",
    "hunter2",
    "sk-",
    "AKIA",
    "eyJ",
    "://",
    "@",
    ":",
    "=",
    '"',
    "'",
    "\\",
    "\n",
    " ",
    "-",
    "_",
    "x",
    "Z9",
]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=12))
def test_idempotent_on_secret_soup(parts: list[str]) -> None:
    check_idempotent("".join(parts))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_idempotent_on_any_text(text: str) -> None:
    check_idempotent(text)


def check_idempotent(text: str) -> None:
    once = R.redact(text)
    twice = R.redact(once.text)
    assert twice.text == once.text
    assert twice.redactions == ()
    # The log is consistent with the text: replaying it on the original gives the output.
    rebuilt, pos = [], 0
    for r in once.redactions:
        assert pos <= r.start < r.end <= len(text)
        assert r.line == text.count("\n", 0, r.start) + 1
        rebuilt += [text[pos : r.start], replacement(r.kind)]
        pos = r.end
    assert "".join(rebuilt) + text[pos:] == once.text


# ------------------------------------------------------------------------------ bytes


def test_redact_bytes_utf8_uses_byte_offsets() -> None:
    data = f"naïve café → {GITHUB_CLASSIC}\n".encode()
    out, reds = R.redact_bytes(data)
    assert out == "naïve café → [REDACTED:github_token]\n".encode()
    (r,) = reds
    assert data[r.start : r.end] == GITHUB_CLASSIC.encode()
    assert r.kind == "github_token"


def test_redact_bytes_binary_keeps_other_bytes() -> None:
    head = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\x80"
    tail = b"\x00\x01\xfa\xfbpassword=h\xe9llo\x00 " + PEM.encode() + b"\xff"
    data = head + b"key=" + AWS_ID.encode() + b"\x00" + tail
    out, reds = R.redact_bytes(data)
    kinds = [r.kind for r in reds]
    assert "aws_access_key" in kinds and "private_key" in kinds
    # each secret gives way to as many bytes: every other byte stays where it was
    assert len(out) == len(data)
    assert out.startswith(head + b"key=[REDACTED]**********\x00\x00\x01\xfa\xfb")
    assert out.endswith(b"[REDACTED:private_key]" + b"*" * (len(PEM) - 22) + b"\xff")
    # The non-ASCII 'password' value is not an ASCII secret: its bytes stay as they were.
    assert b"password=h\xe9llo\x00" in out
    for r in reds:
        assert data[r.start : r.end].isascii()


def test_redact_bytes_without_secrets_is_identity() -> None:
    data = bytes(range(256)) * 4
    assert R.redact_bytes(data) == (data, ())


# ---------------------------------------------------------------------------- file names


@pytest.mark.parametrize(
    "name",
    [
        ".env",
        ".env.local",
        ".env.production",
        "prod.env",
        "id_rsa",
        "id_dsa",
        "id_ecdsa",
        "id_ed25519",
        "ID_RSA",
        "home/bob/.ssh/id_ed25519",
        "server.pem",
        "tls.key",
        "cert.p12",
        "cert.pfx",
        "keystore.jks",
        ".netrc",
        ".pgpass",
        ".npmrc",
        ".pypirc",
        ".git-credentials",
        "credentials.json",
        "client_secret_1234.apps.googleusercontent.com.json",
        "passwords.kdbx",
        "putty.ppk",
    ],
)
def test_secret_filenames_refused_with_reason(name: str) -> None:
    reason = secret_filename_reason(name)
    assert reason is not None
    assert name.rsplit("/", 1)[-1] in reason


@pytest.mark.parametrize(
    "name",
    [
        "id_rsa.pub",
        "id_ed25519.pub",
        "notes.md",
        "environment.md",
        "env.py",
        "keyboard-shortcuts.md",
        "keys.md",
        "monkey.txt",
        "transcript.jsonl",
        "password-policy.md",
        "README",
        "photo.png",
        "pem.txt",
        "",
    ],
)
def test_ordinary_filenames_pass(name: str) -> None:
    assert secret_filename_reason(name) is None


# ----------------------------------------------------------------------------- speed


def test_one_megabyte_of_ordinary_text_is_fast() -> None:
    """A guard against a regex blow-up (time growing faster than the text), not a speed
    target, which scripts/bench_secrets.py measures: 1 MB of prose costs at most 20 times
    what 100 KB of it costs (linear is 10), both in CPU time back to back, so a busy or
    slow machine slows both alike."""
    text = (ORDINARY * (1_000_000 // len(ORDINARY) + 1))[:1_000_000]
    R.redact(text[:10_000])  # warm the regex caches
    t0 = time.process_time()
    R.redact(text[:100_000])
    small = time.process_time() - t0
    t0 = time.process_time()
    res = R.redact(text)
    big = time.process_time() - t0
    assert big < 20 * small + 0.05, f"{big:.3f}s for 1 MB, {small:.3f}s for 100 KB"
    assert res.redactions == ()


# ----------------------------------------------------------------- keyword secrets in prose

PROSE_PW = "Winter" + "Probe2024!"
PROSE_WIFI = "Cafe" + "ProbeWifi77"
PROSE_AWS = "k3Jd8Fh2" + "LmQw9ErTy5UiOp1AsDf6GhJkL7ZxCvBn"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"My password is {PROSE_PW} for the VPN", PROSE_PW),
        (f'The wifi password is "{PROSE_WIFI}"', PROSE_WIFI),
        (f"my aws secret is {PROSE_AWS}", PROSE_AWS),
        ("The password for the office printer is Prnt-4471.", "Prnt-4471"),
        ("password to the NAS: nas-Pebble-66", "nas-Pebble-66"),
        ("I changed the root password to Qz7!mLp2Vw yesterday.", "Qz7!mLp2Vw"),
        ("The database password was set to 'Ledger Stone 9' during setup.", "Ledger Stone 9"),
        ("Her banking PIN is 8817.", "8817"),
        ("Use Hunter2Blue! as the password for the staging box.", "Hunter2Blue!"),
        ("wifi: CafeNet / password espresso4life", "espresso4life"),
        ("The wifi password’s CafeLatte2023, by the way.", "CafeLatte2023"),
    ],
)
def test_keyword_secret_in_prose(text: str, secret: str) -> None:
    res = R.redact(text)
    assert secret not in res.text
    assert res.text == text.replace(secret, marker("keyword_secret"))


@pytest.mark.parametrize(
    "text",
    [
        "The password policy is strict.",
        "My password is too long to remember.",
        "The password is stored in 1Password, not here.",
        "My secret is that I love cake.",
        "The secret is to let the dough rest overnight.",
        "The token is valid for 24 hours.",
        "The key is consistency, not intensity.",
        "Your password is at least 12 characters long.",
        "The pin is loose on the left hinge.",
        "The token bucket refills at 10 per second.",
        "if token is None: raise ValueError('no token')",
        "The passcode screen appears after 5 minutes.",
        "He kept the password a secret.",
        "Secret Santa this year is on December 18th.",
    ],
)
def test_prose_that_only_mentions_a_secret_is_left(text: str) -> None:
    assert R.redact(text).text == text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("the password is swordfish", "swordfish"),
        ("My password is Winter", "Winter"),  # the first of two appends
        ("Her password? Bluebird", "Bluebird"),
        ("paypal password Tr0ub — no wait, it's Tr0ub4dor&9", "Tr0ub4dor&9"),
        ("omg sorry wrong one, actually it's Pickles#45", "Pickles#45"),
        ("Office alarm: code 7720, panel is by the kitchen.", "7720"),
        ("the lockbox on the porch is 3-9-2-7, keys are inside", "3-9-2-7"),
        ("The key safe next to the front door opens with 1357.", "1357"),
        ("give Marco the storage unit code (2468) before Friday", "2468"),
        ("Le digicode est B1984 et l'interphone", "B1984"),
        ("il codice del cancello è 4545", "4545"),
        ("- **Alarm:** 4826", "4826"),
        ("PS: the wifi at the cabin is loonlake1987.", "loonlake1987"),
        ('Logging in with username "ops" and password "0psCenter!7"...', "0psCenter!7"),
        ("what's the router admin pass?\nadmin8812x unless someone changed it", "admin8812x"),
        ("the staging admin is admin / Stag1ng-Adm1n", "Stag1ng-Adm1n"),
        ("FileVault recovery key: QW4R-T7YU-9P2K-LM3N", "QW4R-T7YU-9P2K-LM3N"),
        ("the passphrase for the drive is purple elephants dance at midnight", "midnight"),
        ("the tablet password is my birthday backwards, 91870319", "91870319"),
        ("Customer gave their account PIN as 6631 for verification.", "6631"),
        (
            "Assistant: I need the sudo password to install it.\nUser: it's hunter2hunter2",
            "hunter2",
        ),
        (
            "agent: please provide the passphrase for the key\nuser: blue kettle sings at dawn",
            "kettle",
        ),
        ("Hotel safe set to 280691 — passports + cash in there", "280691"),
        ("library locker 18 combo 27 15 33 — notes in there", "27 15 33"),
        ("the password for the pension website, is it Rosie&Max2 or", "Rosie&Max2"),
        ("@priya staging admin pw got rotated this morning → Tq9!rmv2LpX", "Tq9!rmv2LpX"),
        ("the password for the team's zoom is giraffe btw, meeting ID is the usual one", "giraffe"),
        ("mat khau wifi la phobo123 nha", "phobo123"),
    ],
)
def test_natural_language_secret_is_redacted(text: str, secret: str) -> None:
    assert secret not in R.redact(text).text


def test_every_recovery_code_of_a_list_is_redacted() -> None:
    text = "2FA backup codes:\n39482017\n55120938\n77340126\nkeep them safe"
    out = R.redact(text).text
    assert not any(c in out for c in ("39482017", "55120938", "77340126"))
    assert out.endswith("\nkeep them safe")


def test_password_column_of_a_markdown_table_is_redacted() -> None:
    text = (
        "| Service | User | Password |\n| --- | --- | --- |\n"
        "| Grafana | admin | gr4fana!Dash |\n| Wiki | bob | (see vault) |"
    )
    out = R.redact(text).text
    assert "gr4fana!Dash" not in out
    assert "| Grafana | admin |" in out and "(see vault)" in out
    table = "| Key | Value |\n|---|---|\n| timeout | 3000 |"
    assert R.redact(table).text == table


@pytest.mark.parametrize(
    "text",
    [
        "The password is required.",
        "the password is expired",
        "Das Passwort ist falsch.",
        "my password is still mine",
        "the wifi is HomeNet5G and the pass is",
        "the wifi is 5GHz",
        "password policy changed, actually it's v2.3.1 now",
        "alarm: 0630 wake up",
        "Gate: 12",
        "alarm set for 0600",
        "I mean it's Python3 not Python2",
        "backup codes are stored in the drawer",
        "the zip code for the house is 30301",
        "    def try_split(self, pw: Split, red: Split) -> None:",
        "User: what version?\nBot: v2.3.1",
        "Q: what is the password policy?\nA: at least 12 chars",
    ],
)
def test_ordinary_text_near_a_keyword_is_kept(text: str) -> None:
    assert R.redact(text).text == text


# --------------------------------------------------------------- a token split across writes


def test_rest_of_a_token_glued_to_a_marker_is_removed() -> None:
    first, rest = "Zq8Xw7Ec6R", "v5Tb4Yn3Um2Ik1"
    stored = R.redact(f"deploy token={first}").text
    assert stored == "deploy token=[REDACTED:password_assignment]"
    res = R.redact(stored + rest + ".\n")
    assert res.text == "deploy token=[REDACTED:password_assignment].\n"
    (r,) = res.redactions
    assert r.kind == "split_token" and stored[r.start - 1] == "]"
    assert replacement("split_token") == ""
    assert R.redact(res.text).redactions == ()


def test_text_after_a_marker_with_a_separator_is_kept() -> None:
    for text in (
        "postgres://app:[REDACTED:url_password]@db:5432/app",
        "key [REDACTED:openai_key], then more",
        "[REDACTED:jwt].",
        "token=[REDACTED:password_assignment]&page=2",
    ):
        assert R.redact(text).text == text


# -------------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        (f"notes-{OPENAI_PROJ}.md", "openai_key"),
        (f"session-{SLACK_BOT}", "slack_token"),
        (f"{GITHUB_CLASSIC}.txt", "github_token"),
        ("token=Zq8Xw7Ec6Rv5Tb4Y", "password_assignment"),
        (f"my password is {PROSE_PW}", "keyword_secret"),
        (f"../../{AWS_ID}", "aws_access_key"),
    ],
)
def test_secret_in_a_name(name: str, kind: str) -> None:
    res = R.redact_name(name)
    assert kind in res.summary()
    assert "[REDACTED:" in res.text


@pytest.mark.parametrize(
    "name",
    [
        "2026-11-30-standup.md",
        "password-reset-flow.md",
        "api-keys-rotation-notes.md",
        "token_budget.py",
        "3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a.png",
        "123e4567-e89b-12d3-a456-426614174000.json",
        "user/default/preferences/editor/L2.md",
        ".L2.md.swp",
    ],
)
def test_ordinary_names_are_left(name: str) -> None:
    assert R.redact_name(name).redactions == ()


# --------------------------------------------------------------------------------- logs


def test_log_filter_redacts_message_args_and_traceback() -> None:
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Keep()
    handler.addFilter(RedactingFilter(R))
    logger = logging.getLogger("contextfs.test_log_filter")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("refused %s: %s", f"user/default/{GITHUB_CLASSIC}", "bad name")
        try:
            raise ValueError(f"no such name {SLACK_BOT}")
        except ValueError:
            logger.exception("while looking up %s", "x")
        logger.info("plain %d line", 3)
        logger.info("refused %s", "user/default/x\n2026-12-03 00:00:00 ERROR forged\x1b[2J")
    finally:
        logger.removeHandler(handler)
    text = "\n".join(records)
    assert GITHUB_CLASSIC not in text and SLACK_BOT not in text
    assert "user/default/[REDACTED:github_token]" in text
    assert "[REDACTED:slack_token]" in text and "Traceback" in text
    assert "plain 3 line" in text
    # a name cannot forge a line (or a terminal escape) in the log
    assert records[-1] == "refused user/default/x\\n2026-12-03 00:00:00 ERROR forged\\x1b[2J"


def test_escape_controls_keeps_one_line_and_plain_text_as_it_is() -> None:
    assert escape_controls("plain name, café ✓") == "plain name, café ✓"
    assert escape_controls("a\nb\r\tc\x00\x1b\x7f\x85\u2028") == (
        "a\\nb\\r\\tc\\x00\\x1b\\x7f\\x85\\u2028"
    )


@pytest.mark.parametrize("seed", range(6))
def test_redact_bytes_binary_scans_only_text_runs_and_finds_the_same(seed: int) -> None:
    """Bytes that are not UTF-8 are scanned in their printable runs only; what they
    replace is what a scan of every byte as latin-1 replaces (secrets in random bytes)."""
    rng = random.Random(seed)
    noise = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 3000))) for _ in range(9)]
    secrets_ = [
        b"key=" + AWS_ID.encode(),
        b"\n" + OPENAI_PROJ.encode() + b"\n",
        b"password=" + b"Tr0ub4dor&3x" + b"\n",
        PEM.encode(),
        b"Authorization: Bearer " + b"abcdefghijklmnopqrstuvwx0123" + b"\r\n",
        GITHUB_CLASSIC.encode(),
        b"\x00" + b"ghp_short\x00",
        b"short pw=ab\x00",
    ]
    data = noise[0] + b"".join(s + n for s, n in zip(secrets_, noise[1:], strict=False))
    data += b"\xff\xfe"  # never valid UTF-8
    out, reds = R.redact_bytes(data)
    every = R._redact(data.decode("latin-1"), ascii_only=True)
    printable = set(range(0x20, 0x7F)) | {9, 10, 13}

    def facts(rs) -> list[tuple]:  # those wholly in printable text
        return [
            (r.kind, r.start, r.end, r.line) for r in rs if set(data[r.start : r.end]) <= printable
        ]

    assert facts(reds) == facts(every.redactions) and len(reds) == len(facts(reds))
    expected, pos = b"", 0  # every byte outside the replaced spans is kept
    for r in reds:
        expected += data[pos : r.start] + fitted_replacement(r.kind, r.end - r.start).encode()
        pos = r.end
    assert out == expected + data[pos:] and len(out) == len(data)
    assert {"openai_key", "private_key", "password_assignment"} <= {r.kind for r in reds}


# ---- a token cut at the end of a write


@pytest.mark.parametrize(
    ("first", "rest", "kind"),
    [
        ("ghp" + "_Lm3Nq5Rs7T", "u9Vw1Xy3Za5Bc7De9Fg1Hi3Jk5", "github_token"),
        ("notes\nsk-" + "proj-Q9w8E7", "r6T5y4U3i2O1p0A9s8D7f6G5h4J3k2L1z0X9c8V7b6", "openai_key"),
        ("AKIA" + "M2N3B4", "V5C6X7Z8L9 is the key id", "aws_access_key"),
        ("xoxb" + "-697778188049-17", "03179740542-RNmHkW5vQ7CF5puzQqmOBZZW", "slack_token"),
    ],
)
def test_the_first_part_of_a_cut_token_is_redacted_at_once(first: str, rest: str, kind: str):
    """`printf 'ghp_…' >> L2.md; printf '…' >> L2.md`: the first part is stored (and kept
    in .history) before the rest arrives, so it is redacted on its own; the rest, glued to
    the marker, is removed as the marker's continuation."""
    stored = R.redact(first).text
    assert stored.endswith(marker(kind))
    assert first.rsplit("\n", 1)[-1] not in stored
    final = R.redact(stored + rest + "\n").text
    assert final == stored + rest[len(rest.split(" ")[0]) :] + "\n"
    assert rest.split(" ")[0] not in final


@pytest.mark.parametrize(
    "text",
    ["I use sk-learn", "see hf_hub", "ASIAN", "tokens start with ghp_", "a ghp_Lm3N.", "gho_abc"],
)
def test_a_text_ending_like_a_token_prefix_is_not_a_cut_token(text: str) -> None:
    assert R.redact(text).text == text


def test_names_are_never_cut_tokens() -> None:
    name = "notes ghp" + "_Lm3N"  # a name is never written in two appends
    assert R.redact_name(name).text == name
    assert R.redact(name).text == "notes " + marker("github_token")


def test_a_long_text_is_redacted_window_by_window_with_nothing_missed_at_the_edges():
    """An inbox file of many MiB is scanned a window at a time (the event loop is not
    held for seconds); a secret on either side of a window's edge, a private key that
    spans one, and their line numbers come out as in a text short enough to scan whole."""
    from contextfs.memory import redact as mod

    filler = "we talked about the garden and the tea we planted in spring\n"
    lines = [filler] * ((mod.BIG_TEXT * 3 // 2) // len(filler))
    planted = [GITHUB_CLASSIC, PEM, f"password: {PW}", AWS_ID, JWT, PEM]
    edges = [mod.WINDOW // 2, mod.WINDOW, mod.WINDOW + mod.OVERLAP // 2, 2 * mod.WINDOW]
    at = sorted({(e // len(filler)) + d for e in edges for d in (-1, 0, 1)})
    for i, line_no in enumerate(at):
        lines.insert(line_no, f"note {i}: {planted[i % len(planted)]}\n")
    text = "".join(lines)
    assert len(text) > mod.BIG_TEXT
    res = R.redact(text)
    for secret in (GITHUB_CLASSIC, AWS_ID, PW, JWT, PEM.splitlines()[1]):
        assert secret not in res.text
    assert len(res.redactions) == len(at)
    for r in res.redactions:  # each where it was, on its line
        assert text.count("\n", 0, r.start) + 1 == r.line
        assert any(text[r.start : r.end] in secret for secret in planted)
    whole = mod.Redactor()._redact(text[: mod.BIG_TEXT], ascii_only=False)  # scanned whole
    windowed = R.redact(text[: mod.BIG_TEXT + 1])
    assert [r.start for r in windowed.redactions if r.end <= mod.BIG_TEXT] == [
        r.start for r in whole.redactions
    ]


@given(
    st.lists(
        st.one_of(
            st.binary(max_size=12),
            st.sampled_from([b"password: hunter2", b"\t\r\n", b"\x00", b"\xff\xfe", b"abcdef"]),
        ),
        max_size=40,
    ),
    st.integers(min_value=1, max_value=40),
)
def test_printable_runs_are_the_runs_a_regex_finds_at_any_window(parts, window):
    """The runs where a secret may be in bytes that are not text: the same as a regular
    expression's over the whole, however the bytes are cut into windows."""
    import re

    from contextfs.memory.redact import PRINTABLE_RUN_MIN, printable_runs

    data = b"".join(parts)
    want = [m.span() for m in re.finditer(rb"[\x20-\x7e\t\r\n]{%d,}" % PRINTABLE_RUN_MIN, data)]
    assert printable_runs(data, window=window) == want
    assert printable_runs(memoryview(data)) == want


def test_every_row_of_a_long_password_table_is_redacted() -> None:
    rows = [f"| svc{i} | user{i} | Pw!{i:05d}x |" for i in range(2000)]
    out = R.redact("| Service | User | Password |\n|---|---|---|\n" + "\n".join(rows)).text
    assert "Pw!" not in out and out.count("| svc1999 | user1999 | [REDACTED:") == 1


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("I've reset it to Sunshine!88 but it still says incorrect", "Sunshine!88"),
        ("log in with Poppy!Seed9 and then change it", "Poppy!Seed9"),
        ("it's Tr0ub4dor&3, zero not O", "Tr0ub4dor&3"),
        ("sw-core enable secret C0reSw!tch#9", "C0reSw!tch#9"),
        # one symbol ending it, or an `@` inside it
        ("the new one is Harbour2031! and it works", "Harbour2031!"),
        ("saved it as Kettle9Drum$ in the notes", "Kettle9Drum$"),
        ("family plan: Bingo7Night! (shared)", "Bingo7Night!"),
        ("it took Quay7@marsh on the second try", "Quay7@marsh"),
    ],
)
def test_a_password_shaped_word_is_caught_without_a_keyword(text: str, secret: str) -> None:
    res = Redactor().redact(text)
    assert secret not in res.text and res.changed


@pytest.mark.parametrize(
    "text",
    [
        "seconds += minutes*60 + hours*3600",
        "return this for Http2ServerRequest#setTimeout",
        "see sentencepiece_model.proto#L299C29-L299C33 for the field",
        "encoded words look like =?iso-8859-1?q?Hello_World?= in headers",
        "Enter a parse tree produced by AutolevParser#varDecl2.",
        'Version("1!1.2.3dev1+abc").public',
        "line width=3,green!90 and purple!90",
        "the answer is Python3 and COVID19, not a password",
        "finally got the iPhone15! so happy",
        "Recall@10 rose to 0.91 and NanoBEIR_mean_ndcg@10 with it",
        "ssh ec2-user@i-0abc123def4567 to get in",
        "the $P_4$-free graphs are cographs",
        "mail John.Smith2@Example.com about it",
        "Summer vibes!!! see you in 2024!",
    ],
)
def test_code_and_references_are_not_password_shaped(text: str) -> None:
    assert not Redactor().redact(text).changed


def test_a_recovery_phrase_alone_on_a_line_is_caught() -> None:
    words = "tiger ocean marble fossil ribbon crisp elder nation velvet siren humble aware"
    res = Redactor().redact(f"wallet backup, do not lose:\n{words}\n")
    assert not any(w in res.text for w in words.split())
    # twelve words of a sentence are not one
    prose = "we walked along the river and then sat down near the old mill for lunch"
    assert not Redactor().redact(f"notes:\n{prose}\n").changed


def test_random_bytes_hold_no_password_shaped_word() -> None:
    """Bytes that are not text (a picture, an archive) are scanned in their printable
    runs, which hold password shapes by chance (`Ab3!kQz9`): the keyword-free detectors
    are for text only, so such bytes come through as written."""
    rng = random.Random(7)
    for _ in range(100):
        data = rng.randbytes(1 << 16)
        assert R.redact_bytes(data) == (data, ())


def test_a_secret_shape_in_a_short_run_of_random_bytes_is_chance() -> None:
    """A keyword secret's shape turns up in random bytes about once a GiB in a short
    printable run (this one, from 2 GiB of them, changed an attachment of random bytes
    by its own redaction); in bytes that are not text only runs of 16 bytes or more are
    scanned, and a secret written into such bytes as text is still found."""
    chance = b"\xe9\x0e4jR\xf7\xbaPW:Y?Y%\t\xd9\xb0\xf0\x18:\xce\xb9\xa4\xe0"
    assert R.redact("PW:Y?Y%").redactions  # in text, it is one
    assert R.redact_bytes(chance) == (chance, ())
    told = b"\xe9\x0e4jR\xf7\xba wifi PW: Y?Y%Qx81\t\xd9\xb0\xf0"
    out, reds = R.redact_bytes(told)
    assert b"Y?Y%" not in out and [r.kind for r in reds] == ["keyword_secret"]
    assert out == b"\xe9\x0e4jR\xf7\xba wifi PW: ********\t\xd9\xb0\xf0"


def test_a_secret_told_twice_is_redacted_both_times() -> None:
    text = "the garage code is four seven seven one, that's four seven seven one. Ring us."
    out = R.redact(text).text
    assert "seven" not in out and out.count("[REDACTED:") == 2, out
    # the same value glued to more characters is another value, and stays a miss, not a
    # half-redacted password
    text = "the wifi pw is Garden2024, or was it Garden2024/5 no idea"
    out = R.redact(text).text
    assert "Garden2024/5" in out and out.count("[REDACTED:") == 1, out
    # unless it has a password's shape of its own
    out = R.redact("the wifi pw is Garden2024, or was it Garden2024! no idea").text
    assert "Garden" not in out and out.count("[REDACTED:") == 2, out
    # nothing found, nothing repeated
    assert not R.redact("four seven seven one, four seven seven one").redactions


def test_a_bitlocker_recovery_key_is_redacted_unnamed() -> None:
    key = "408122-553190-117095-629044-310188-775412-004466-219987"
    out = R.redact(f"used {key} from the vault").text
    assert out == "used [REDACTED:keyword_secret] from the vault"
    assert not R.redact("order 408122-553190-117095 shipped").redactions


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("whats the pw for the shed laptop\nbarnowl\nthx", "barnowl"),
        ("[09:12] Ola: what's the guest wifi password?\n[09:13] Ben: Fjord#Lights", "Fjord#Lights"),
        ("Hast du die PIN vom Fahrradschloss?\nja, 7731 wie immer", "7731"),
        ("Mira: which code opens the gate?\nMira: the side one\nMe: 5520", "5520"),
        ('"whats the padlock combo"\n"31-07-22"', "31-07-22"),
    ],
)
def test_an_answer_on_the_line_after_a_question_for_a_password_is_redacted(
    text: str, secret: str
) -> None:
    res = R.redact(text)
    assert secret not in res.text and res.changed, res.text


@pytest.mark.parametrize(
    "text",
    [
        "Did you change your password?\nYesterday",
        "what's the error code?\n404",
        "Which password manager do you use?\nBitwarden",
        "What's the password policy?\nAt least twelve characters.",
        "Do you remember the wifi password?\nNo idea, ask Sam",
        "# what is the seed for?\nelse:\n    return seed",
    ],
)
def test_a_line_after_a_question_that_is_no_password_is_kept(text: str) -> None:
    assert not R.redact(text).changed


def test_the_other_entries_of_a_list_of_passwords_are_redacted() -> None:
    text = "logins for the cabin: router Pine#Cone88, tv hulu4cabin, printer Toner7Jam"
    out = R.redact(text).text
    assert not any(v in out for v in ("Pine#Cone88", "hulu4cabin", "Toner7Jam")), out
    lines = "accounts\n- email: Wx!58qLp\n- music: mixtape42\n- photos: sunsetcliffs\n"
    out = R.redact(lines).text
    assert not any(v in out for v in ("Wx!58qLp", "mixtape42", "sunsetcliffs")), out
    # the settings beside a password in a config file stay, and so does a user's name
    config = "password: Xy9!abQ2\nhost: localhost\nport: 5432\nuser: deploy7\n"
    out = R.redact(config).text
    assert "localhost" in out and "5432" in out and "deploy7" in out and "Xy9" not in out
    # words after a secret are no list: `…, niet aan klanten geven`
    out = R.redact("het wachtwoord van de kassa: Tulp&Kaas2021, niet aan klanten geven").text
    assert out.endswith("niet aan klanten geven"), out


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("your login code is 604913, it expires soon", "604913"),
        ("the ATM code is 8824 don't tell", "8824"),
        ("for the gym locker I picked 7341 so I'd remember", "7341"),
        ("press 2290 on the intercom, then the bell for flat 4", "2290"),
    ],
)
def test_a_code_for_a_card_a_login_or_a_lock_is_redacted(text: str, secret: str) -> None:
    res = R.redact(text)
    assert secret not in res.text, res.text


@pytest.mark.parametrize(
    "text",
    [
        "the zip code is 90210",
        "I used 2000 calories before the gate closed",
        "we set 1500 aside for the door repair",
        "the error code is 5023 on the card reader",
        # a door's, a gate's or a locker's own number, right after the noun
        "Use door 204 for the lounge.",
        "Take door 100 to the lab.",
        "My flight leaves from gate 112.",
        "I prefer brush 100 for door 100.",
    ],
)
def test_numbers_near_a_lock_that_are_no_code_are_kept(text: str) -> None:
    assert not R.redact(text).changed, R.redact(text).text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("the storage safe combination is twenty one fifteen nine", "twenty one fifteen nine"),
        ("new card PIN six one zero two, memorise it", "six one zero two"),
        ("shed padlock combination: L14 R30 L7", "L14 R30 L7"),
        ("the wall safe combination is right 12, left 40, right 3", "right 12, left 40, right 3"),
        ("the router's admin pw rotated to Falcon-Ridge-71 last night", "Falcon-Ridge-71"),
        ("my tablet unlocks with 408817 if you need it", "408817"),
        ("forgot again, the locker code's 7715 right?", "7715"),
        ("gaming: steam Pixel#Fox42, origin quest-knight-19", "Pixel#Fox42"),
        ("gaming: steam Pixel#Fox42, origin quest-knight-19", "quest-knight-19"),
        ("garage stuff: side door 4417, alarm 90210, freezer 3312", "4417"),
        ("the password my manager set is Tq7-river-22, keep it", "Tq7-river-22"),
    ],
)
def test_codes_read_out_dialled_rotated_or_listed_are_redacted(text: str, secret: str) -> None:
    res = R.redact(text)
    assert secret not in res.text, res.text


def test_an_aws_secret_told_after_its_key_id_and_a_hubspot_token_are_redacted() -> None:
    key_id = "AKIA" + "QX7RTN2WLM4PZK8D"
    secret = "Wq7rTz2Lm9Xv4Nb8Kp1Yc6Df3Gh5Jk0Ae2Ur9Osx"
    out = R.redact(f"staging bucket: {key_id} with secret {secret}, rotate after").text
    assert key_id not in out and secret not in out, out
    token = "pat-" + "na1-4f2c9e71-8b3a-4d6e-a1f0-77c2e9b3d514"
    out = R.redact(f"kept the private app token ({token}) for now").text
    assert "[REDACTED:hubspot_token]" in out, out
    # a 40-character word far from any key id stays
    assert not R.redact("see ThisIsAFortyCharacterIdentifierName01 in the docs").changed
    # and another provider's token after a key id keeps its own kind
    other = "sk-" + "proj4Tq9ZmX2vLw8RkP1nYb6HdJc3SfGa7Ue5Vt0"
    out = R.redact(f"key {key_id} openai {other} ").text
    assert "[REDACTED:aws_access_key]" in out and "[REDACTED:openai_key]" in out, out


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Tenant: the door code isn't working?\nPM: sorry!! it changed on Monday, it's 4826 now",
         "4826"),
        ("what's the wifi password?\nTom: hmm, I think it's Harbor!78 now", "Harbor!78"),
        ("¿Cuál es el PIN de la alarma?\n— 2211, pero solo para devoluciones.", "2211"),
    ],
)  # fmt: skip
def test_an_answer_told_later_in_the_answer_line_is_redacted(text: str, secret: str) -> None:
    res = R.redact(text)
    assert secret not in res.text and res.changed, res.text


@pytest.mark.parametrize(
    "text",
    [
        "Tenant: the door code isn't working?\nPM: sorry, it's 2 doors down, it's broken",
        "what's the door code?\nno idea, it's 10 minutes away",
        "what's the wifi password?\nsorry, it's in the drawer",
        "what's the error code?\nsorry, it's 404 again",
    ],
)
def test_a_later_it_s_in_a_line_that_answers_no_code_is_kept(text: str) -> None:
    assert not R.redact(text).changed, R.redact(text).text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Код от подъезда 2749, квартира 47, третий этаж.", "2749"),
        ("код от домофона 3517, квартира 42", "3517"),
        ("رمز البوابة الخلفية ٧٣٩٢", "٧٣٩٢"),
        ("קוד האזעקה בבית: 8015", "8015"),
        ("the door code for the back gate 4417, then push hard", "4417"),
        ("the in-room safe is stuck; master override is 999102, log it", "999102"),
        ("building entry: press 31 then bell, or fob override 7748 if nobody answers", "7748"),
    ],
)
def test_a_code_whose_lock_is_named_without_a_verb_or_an_override_is_redacted(
    text: str, secret: str
) -> None:
    res = R.redact(text)
    assert secret not in res.text, res.text


@pytest.mark.parametrize(
    "text",
    [
        "you can override 1500 settings in the config",
        "the code for the door 2 times a day",
        "override the gate timeout 3000 ms",
        "the code for unit 1234 is in the office",
        "رمز المنتج 4471",  # a product's code
        "bro my combo is 4-3-2 then dash, that's the whole secret",
    ],
)
def test_numbers_after_a_code_word_and_no_lock_are_kept(text: str) -> None:
    assert not R.redact(text).changed, R.redact(text).text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("宅配ボックスの暗証番号は 318 にしておいたよ", "318"),
        ("家里的门锁密码改成 520131 了，记住哦。", "520131"),
        ("사물함 비밀번호 9146으로 바꿨어", "9146"),
        ("와이파이 비번 pcbang0707!! 이에요", "pcbang0707!!"),
    ],
)
def test_a_code_after_a_keyword_in_a_script_without_spaces_is_redacted(
    text: str, secret: str
) -> None:
    res = R.redact(text)
    assert secret not in res.text, res.text


@pytest.mark.parametrize(
    "text", ["暗号 1024 bit の鍵", "비밀번호 4자리", "密码长度 16 位", "密码 3 次输错就锁定"]
)
def test_a_count_or_a_measure_after_a_keyword_without_spaces_is_kept(text: str) -> None:
    assert not R.redact(text).changed, R.redact(text).text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("the roller door keypad takes 5830 then the up arrow", "5830"),
        ("the alarm panel inside wants 1966 within 30 seconds", "1966"),
        ("Der Schlüsselkasten am Geräteschuppen geht mit 0917 auf.", "0917"),
        ("O código do portão é 1 2 0 8 e o do alarme é 4 4 0 1", "4 4 0 1"),
        ("The safe combination only lives in my head, so: L 24, R 8, L 61", "L 24, R 8, L 61"),
        ("gun safe dial: R 22 L 8 R 40", "R 22 L 8 R 40"),
        ("The safe has a new combo. Left 24, right 11, left 38, in that order.",
         "Left 24, right 11, left 38"),
    ],
)  # fmt: skip
def test_a_code_a_lock_takes_and_a_dial_s_turns_are_redacted(text: str, secret: str) -> None:
    res = R.redact(text)
    assert secret not in res.text, res.text


@pytest.mark.parametrize(
    "text",
    [
        "the locksmith wants 1500 for the door",
        "the safe takes 4 AA batteries",
        "the gate takes 1500 now, the fence later",
        "the safe is two streets away: left 2, right 3, left 4 blocks",
        "press L1 R1 L2 on the controller to unlock the safe",
        "the lock screen shortcut: L1, L2, R3",
    ],
)
def test_a_price_a_way_or_buttons_near_a_lock_are_kept(text: str) -> None:
    assert not R.redact(text).changed, R.redact(text).text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Guest wifi: Robinsons_Guest, password welcomefriends", "welcomefriends"),
        ("Club bank: customer no. 44817302, memorable word halyard. Delete this after", "halyard"),
        ("Telephone banking — security number 662190, memorable word PRIMROSE", "PRIMROSE"),
    ],
)
def test_a_plain_word_ending_a_list_entry_after_a_keyword_is_redacted(
    text: str, secret: str
) -> None:
    res = R.redact(text)
    assert secret not in res.text, res.text


@pytest.mark.parametrize(
    "text",
    [
        "Features: login, password reset.",
        "Account settings: email, password protected",
        "Fields: username, password required",
        "You need your email, password manager, and phone.",
        "the user sets a name, password twice.",
        "Supported: OAuth, password hashing, 2FA",
        "See also: login, password policy",
        "def f(self, pw Split)",
    ],
)
def test_words_about_passwords_in_a_list_are_kept(text: str) -> None:
    assert not R.redact(text).changed, R.redact(text).text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("the wifi pasword is on the router, it says X7K9-MP2Q-44RT is that it?",
         "X7K9-MP2Q-44RT"),
        ("the recovery key Apple gave me is R7KQ-2MXP-9WTD-4HLC-8NVB-3JFY, I printed it",
         "R7KQ-2MXP-9WTD-4HLC-8NVB-3JFY"),
        ("Códigos de recuperación (recovery codes): 9K2M-4TXQ, 7PLW-3ZRN.", "7PLW-3ZRN"),
        ("Exchange 2FA backup key from the setup email: K4RTQ7MZ2XWPLN5B", "K4RTQ7MZ2XWPLN5B"),
        ("> whats the pw for the router\nits on the sticker: 7HQ4-KP9X-22MR", "7HQ4-KP9X-22MR"),
    ],
)  # fmt: skip
def test_a_key_in_groups_or_named_a_few_words_before_is_redacted(text: str, secret: str) -> None:
    res = R.redact(text)
    assert secret not in res.text, res.text


@pytest.mark.parametrize(
    "text",
    [
        "ids 1A2B-3C4D-5E6F and ISO-8859-1 and AES-256-GCM and ABCD-EFGH-IJKL",
        "released 2024-01-15, see RFC-2119-STYLE docs",
        "the backup keys are stored in the vault",
        "recovery codes were generated in 2023: see the admin page",
        "the recovery key is required: ask IT",
        "SN: AB12-CD34, part X-AB12-CD34-EF56",
    ],
)
def test_ids_and_words_near_a_recovery_key_are_kept(text: str) -> None:
    assert not R.redact(text).changed, R.redact(text).text


def test_a_numbered_recovery_phrase_without_a_keyword_is_redacted() -> None:
    words = "rival hedgehog cabin umbrella drastic pupil salmon boring verify meadow tunnel oyster"
    numbered = " ".join(f"{i} {w}" for i, w in enumerate(words.split(), 1))
    out = R.redact(f"words as he numbered them: {numbered}").text
    assert not any(w in out for w in words.split()), out
    out = R.redact("\n".join(f"{i}) {w}" for i, w in enumerate(words.split(), 1))).text
    assert not any(w in out for w in words.split()), out
    # a numbered list of steps that goes on, or is out of order, is no phrase
    steps = " ".join(f"{i} {w}" for i, w in enumerate((*words.split(), "more"), 1))
    assert not R.redact(f"steps: {steps}").changed
    shuffled = (
        "1 cup 3 eggs 2 sugar 4 milk 5 salt 6 flour 7 water 8 yeast 9 oil 10 honey 11 nut 12 fig"
    )
    assert not R.redact(shuffled).changed


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Пароль от вайфая на даче: Самовар_1987", "Самовар_1987"),
        ("la contraseña para el wifi es Gato#2020", "Gato#2020"),
        ("la password per il wifi è Gatto2020", "Gatto2020"),
    ],
)
def test_a_password_for_something_named_with_another_language_s_preposition(
    text: str, secret: str
) -> None:
    res = R.redact(text)
    assert secret not in res.text, res.text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("school portal password is bluejay seven seven all lowercase", "bluejay seven seven"),
        ("council tax site password is lantern dash nine two", "lantern dash nine two"),
    ],
)
def test_a_password_read_out_as_a_word_and_digits_is_redacted(text: str, secret: str) -> None:
    res = R.redact(text)
    assert secret not in res.text, res.text


@pytest.mark.parametrize(
    "text",
    [
        "the password is at least eight characters",
        "the password is required one two three times",
        "my password is only four or five letters",
        "the password is usually twelve or more",
        "the password is changed every two three weeks",
    ],
)
def test_numbers_in_words_about_a_password_are_kept(text: str) -> None:
    assert not R.redact(text).changed, R.redact(text).text


def test_a_table_of_pipes_without_a_rule_line_is_read_by_its_header() -> None:
    text = "| Room | Device | Code |\n| Kitchen | Alarm panel | 5151 |\n| Study | Safe | 880412 |"
    out = R.redact(text).text
    assert "5151" not in out and "880412" not in out and "Alarm panel" in out, out
    # a code column where no lock is named, and a header that is not a block's first row
    assert not R.redact("| Code | Meaning |\n| 404 | Not found |\n| 500 | Error |").changed
    text = "| a | b | c |\n| Service | User | Password |\n| Grafana | admin | Dash-board |"
    assert not R.redact(text).changed


def test_a_file_path_after_a_password_shorthand_is_no_value() -> None:
    """`pass` is a password's shorthand, and a code comment says "the forward pass is
    index/bert.py": a file's path under a folder, with its suffix, is not a credential
    (a clone of a repository into a node had that comment rewritten)."""
    text = "# MiniLM's forward pass is index/bert.py over these weights\n"
    assert not R.redact(text).redactions
    assert not R.redact("the build pass is src/main.rs, then the tests").redactions
    assert (
        R.redact("the wifi pass is Tr0ub/4dor.x1").text
        == "the wifi pass is [REDACTED:keyword_secret]"
    )


# a line of a CA certificate in Debian's bundle: by chance, a keyword's shape and a token's
CERT_LINE = "hwjCxAnxl4YqKE3idMDaxIzb3+KhF1nOJFl0Mdp//TBt2dzhauH8XwIDAQABo4IB"
CERT = (
    "-----BEGIN CERTIFICATE-----\n"
    "MIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ\n"
    f"{CERT_LINE}\n"
    "GjCCARYwDwYDVR0TAQH/BAUwAwEB/zAOBgNVHQ8BAf8EBAMCAQYwHQYDVR0OBBYE\n"
    "-----END CERTIFICATE-----\n"
)


def test_a_certificate_is_public_and_a_private_key_beside_it_is_not() -> None:
    """A CA bundle copied into a node had a line of a certificate redacted (TLS could no
    longer read the bundle): a certificate, a public key or a signature block is public
    and not scanned, also where a window of a long text cuts it; a private key block next
    to it, and a password after a cut one, are still redacted."""
    assert R.redact(f"x\n{CERT_LINE}\n").redactions  # the same line alone looks like one
    assert not R.redact(CERT).redactions
    assert not R.redact(CERT.replace("CERTIFICATE", "PUBLIC KEY")).redactions
    assert not R.redact(CERT[: CERT.index(CERT_LINE) + 70]).redactions  # its END cut off
    assert not R.redact(CERT[CERT.index(CERT_LINE) - 20 :]).redactions  # its BEGIN cut off
    both = R.redact(CERT + PEM + "\n")
    assert [r.kind for r in both.redactions] == ["private_key"]
    assert both.text.startswith(CERT)
    cut = R.redact(CERT[:100] + "\nthe wifi password is Tr0ub4dor&3x\n")
    assert [r.kind for r in cut.redactions] == ["keyword_secret"]


SEED_12 = "tiger ocean marble canvas violin throne basket pepper rocket meadow hollow aware"


def test_a_vocabulary_in_code_is_no_recovery_phrase() -> None:
    """Lines of lowercase words in a source file (a colour list of 15 words on its line,
    word forms of one another) were redacted as recovery phrases in a repository cloned
    into a node. A line among other such lines whose words together are no phrase's
    count, or holding two words with the same first four letters (BIP39's words differ
    in them), is a vocabulary; a phrase alone, or split 12 + 12 over two lines, is not."""
    colours = (
        'COLOURS = _words(\n    """\n'
        "    red orange yellow green blue purple violet pink brown black white grey gray"
        " silver gold\n"
        "    golden beige cream ivory navy teal turquoise cyan magenta maroon burgundy crimson\n"
        '    """\n)\n'
    )
    assert not R.redact(colours).redactions
    forms = (
        "colour color colours colors salary salaries wage wages pay rise rent price fee cost costs"
    )
    assert not R.redact(f"{forms}\n").redactions
    assert [r.kind for r in R.redact(f"wallet backup:\n{SEED_12}\n").redactions] == [
        "keyword_secret"
    ]
    other = SEED_12.replace("tiger", "zebra").replace("aware", "bright")
    split = R.redact(f"backup\n{SEED_12}\n{other}\nthanks")
    assert split.text == "backup\n[REDACTED:keyword_secret]\n[REDACTED:keyword_secret]\nthanks"


def test_the_name_of_a_hash_or_cipher_is_no_password() -> None:
    """`password: aes-256-gcm` in a config's comment says how passwords are kept."""
    for name in ("aes-256-gcm", "sha-256", "pbkdf2-sha512", "utf-8"):
        assert not R.redact(f"the password is {name}\n").redactions, name
    # a word in brackets near a password word is taken for one unless it names the method
    said = "The superuser has a random password and every connection must give it\n"
    assert not R.redact(said + "(scram-sha-256), so a test can look for it.\n").redactions
    assert R.redact(said + "(Scram-Tr0ub4!), so a test can look for it.\n").redactions
    assert R.redact("the password is Sha256-Tr0ub!\n").redactions


def test_a_text_vouched_for_is_kept_and_a_secret_never_vouched_for(monkeypatch) -> None:
    """A worker thread scans an archive part ahead (`vouch`); the event loop's redaction of
    the same text at its save finds it clean without scanning it again. A text holding a
    secret is not vouched for, and is still redacted."""
    r = Redactor()
    clean = "Efua walked Bramble round the park.\n" * 2000
    assert r.vouch(clean) is True
    scans = []
    real = Redactor._redact

    def counted(self, text, **kw):
        scans.append(len(text))
        return real(self, text, **kw)

    monkeypatch.setattr(Redactor, "_redact", counted)
    assert r.redact(clean) == RedactResult(clean, ())
    assert scans == []  # found vouched for: not scanned again
    secret = clean + "my api key is sk-proj-" + "a1B2c3D4e5" * 5 + "\n"
    assert r.vouch(secret) is False
    assert "sk-proj-" not in r.redact(secret).text
    assert r.redact(clean).text == clean and len(scans) > 1  # scanned again: still clean


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("redis-cli -h 10.1.2.3 -a Cache!Pass9 info", "Cache!Pass9"),
        ("zip -r -P 'Arch1ve-Pw' out.zip reports/", "Arch1ve-Pw"),
        ("7z a -pSevenZip44 notes.7z notes/", "SevenZip44"),
        ("ldapwhoami -x -D cn=ro,dc=lab -w Ro-Bind-8", "Ro-Bind-8"),
        ("sqlcmd -S db01 -U sa -P Sq1Adm!n -Q 'select 1'", "Sq1Adm!n"),
        ("openssl enc -d -aes-256-cbc -in x.enc -pass pass:Dec0de-Me", "Dec0de-Me"),
        ("smbclient //fs/team -U alice%Team-Share7", "Team-Share7"),
        ("htpasswd -b /etc/nginx/.htpasswd ops Ops-Web-31", "Ops-Web-31"),
        ("htpasswd -nb ops Ops-Web-32", "Ops-Web-32"),
        ("echo 'Sudo-Pw-12' | sudo -S apt update", "Sudo-Pw-12"),
        ("echo 'deploy:Chp4ss-Dep' | chpasswd", "Chp4ss-Dep"),
        ("define('SMTP_PASSWORD', 'Mail-Out-77');", "Mail-Out-77"),
        ('os.environ.setdefault("GITEA_TOKEN", "g7Kq2Lm9Xz4Rw8Tn")', "g7Kq2Lm9Xz4Rw8Tn"),
        ("db.lab.internal:5432:metrics:grafana:Graf-Db-64", "Graf-Db-64"),
    ],
)  # fmt: skip
def test_a_password_in_shell_history_or_a_config_line_is_redacted(text: str, secret: str) -> None:
    res = R.redact(text)
    assert secret not in res.text, res.text


@pytest.mark.parametrize(
    "text",
    [
        "redis-cli -a $REDIS_PASSWORD ping",
        "zip -r out.zip reports/ && unzip -l out.zip",
        "htpasswd -c /etc/nginx/.htpasswd ops",
        "htpasswd -b /etc/nginx/.htpasswd ops",
        "echo 'hello world' | sudo tee /etc/motd",
        "define('WP_DEBUG_LOG', 'wp-content/debug.log');",
        "form.field('password', 'Password', required=True)",
        'translations.add("password", "Mot de passe")',
        "12:30:45:100:200",
        "localhost:5432 is where postgres listens",
    ],
)
def test_commands_and_config_lines_without_a_password_are_kept(text: str) -> None:
    assert not R.redact(text).changed, R.redact(text).text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("8821 is the code for the bike shed", "8821"),
        ("Bramble2020 was my old password, the new one is in the app", "Bramble2020"),
        ("ok 0519 is his PIN, don't tell him I told you", "0519"),
        ("2468 = alarm code (unset)", "2468"),
        ("Kettle!42 → that's the wifi password", "Kettle!42"),
        ("the wifi password, spelled out: capital R, o, b, i, n, four, four", "capital R"),
        ("the pin is seven, two, double zero", "seven, two, double zero"),
        ("wifi key is kilo nine romeo two whiskey seven, all caps", "kilo nine romeo"),
        ("Codes: back door 3380, garage 6120", "3380"),
        ("PINs — Mia's phone 2207, Leo's phone 1190", "2207"),
        ("door codes: studio 4411, office 5522", "4411"),
        ("site,user,password\nwiki,jo,Wiki-Jo-8\nmail,jo,Mail-Jo-9", "Wiki-Jo-8"),
        ("site;user;password\nwiki;jo;Wiki-Jo-8\nmail;jo;Mail-Jo-9", "Mail-Jo-9"),
        ("tried logging in with Parsnip1984 but it's locked", "Parsnip1984"),
        ("log in as root with Rack-Room-Admin-3", "Rack-Room-Admin-3"),
        ("let yourself in with 4471 at the side door", "4471"),
        ("Passwort fürs WLAN: kaffee-und-kuchen", "kaffee-und-kuchen"),
        ("o código do cacifo é 3316", "3316"),
        ("der Code vom Spind ist 2211", "2211"),
        ("il codice dell'armadietto è 7720", "7720"),
        ("the router pass is hedgehog", "hedgehog"),
        ("| name | pass |\n|---|---|\n| nas | Nas-Pw-2019 |", "Nas-Pw-2019"),
        ("the master password is four random words: otter violin cactus harbour",
         "otter violin cactus harbour"),
        ("Trezor recovery phrase ocean ribbon absent olive canyon drift stool harvest ozone"
         " pepper famous wrist", "ocean ribbon absent"),
    ],
)  # fmt: skip
def test_a_secret_told_in_its_own_layout_is_redacted(text: str, secret: str) -> None:
    res = R.redact(text)
    assert secret not in res.text, res.text


@pytest.mark.parametrize(
    "text",
    [
        "123456 is the most common password",
        "    tmp1 = passcode",
        "90210 is the zip code and 0161 is the area code",
        "404 is the error code you get",
        "4590 is the code we use for the project",
        "1Password is the password manager we use",
        "The password manager we use is 1Password.",
        "The ticket for the password reset is HELP-2290.",
        "2024 was the year the door code changed",
        "Codes: 200 OK, 404 Not Found, 500 Server Error",
        "zip codes: Boston 02118, Austin 78701",
        "name,email,role\nKate,kate@example.com,admin",
        "id;title;status\n1;Fix the password reset page;open",
        "sign in with Google, log in with Auth0 or unlock with Face ID",
        "log in with your own password, not the shared one",
        "the password is hard-to-guess and up-to-date",
        "the mountain pass is Stelvio",
        "my bus pass is expired",
        "the password is a mess, I think",
        "the pin is four digits long",
    ],
)
def test_words_about_secrets_in_those_layouts_are_kept(text: str) -> None:
    assert not R.redact(text).changed, R.redact(text).text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("backup codes for the old github org account: 5521 9034, 7718 2290", "7718 2290"),
        ("recovery codes 71820-33019 and 55012-99821", "55012-99821"),
        ("till supervisor code 8120, manager override 771203", "8120"),
        ("Lockers — Jo 412, Sam 733", "412"),
        ("my master password is oak river candle moss, all lowercase with spaces",
         "oak river candle moss"),
        ("Wi-Fi: teaandtoast (all one word)", "teaandtoast"),
        ("wifi pw is doughnut lmao", "doughnut"),
        ("the login is user sam, pass is Doughnut77", "Doughnut77"),
        ("the quiz wifi password, which is flapjack.", "flapjack"),
        ("kata laluan wifi rumah ialah Rumah2024", "Rumah2024"),
        ("Parola de la laptop este Laptop!Nou9", "Laptop!Nou9"),
        ("PIN kartu ATM ayah adalah 5521", "5521"),
        ("I've tried Pancake2019 twice and the account is locked", "Pancake2019"),
    ],
)  # fmt: skip
def test_a_secret_told_as_people_write_it_is_redacted(text: str, secret: str) -> None:
    res = R.redact(text)
    assert secret not in res.text, res.text


@pytest.mark.parametrize(
    "text",
    [
        "Alarms: Monday 0630, Tuesday 0700",
        "Lockers are assigned at the front desk, 12 per floor",
        "the password is case sensitive, all lowercase",
        "the password is the same, all lowercase",
        "password reset lol, third time this week",
        "I reset the router and my account works again",
        "Kata laluan anda telah tamat tempoh.",
        "Parola trebuie schimbată la fiecare 90 de zile.",
        "the pin is four digits long",
        "Our manager code review is on Friday at 1500",
    ],
)
def test_words_near_those_secrets_are_kept(text: str) -> None:
    assert not R.redact(text).changed, R.redact(text).text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ('the caller gave the account password "clementine" and I stopped her', "clementine"),
        ("the photocopier code is 6612", "6612"),
        ("voicemail PIN: 9091", "9091"),
        ("the car park barrier code is 5130", "5130"),
        ('lobby: name "Dockside", pass mustard', "mustard"),
        ("guest wifi: BarnNet, key haybales", "haybales"),
        ("login is the shop address, pw flour-water-salt", "flour-water-salt"),
        ("the heating app login is home@example.com with Boiler2023", "Boiler2023"),
        ("the wifi password is lemonade and please don't change it", "lemonade"),
    ],
)
def test_a_value_in_a_quote_a_list_entry_or_an_office_device_is_redacted(
    text: str, secret: str
) -> None:
    res = R.redact(text)
    assert secret not in res.text, res.text


@pytest.mark.parametrize(
    "text",
    [
        'the field is labelled "Password" in the form',
        'set "auth_method" to "password" in the config',
        "the printer code is on the sticker underneath",
        "the results: 80%, pass rate high",
        "slides: intro, key points, summary",
        "log in as admin with your own password",
        "the password is required and please use a new one",
    ],
)
def test_labels_lists_and_office_words_are_kept(text: str) -> None:
    assert not R.redact(text).changed, R.redact(text).text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("if the laptop asks for a password just put in crumpet, it's what he uses", "crumpet"),
        ("to get onto the guest network use visitors2go", "visitors2go"),
        ("it wants the wifi thing, try marmot77", "marmot77"),
        ("the keypad beeps, then enter 6021 and wait", "6021"),
        ("PIN? same as my gym locker, 5150", "5150"),
        ("the number for the key safe is our anniversary, 0611", "0611"),
        ("the combination's her birthday 2 9 0 3", "2 9 0 3"),
        ("tell Jo the alarm is 3-3-0-9 and she has a minute", "3-3-0-9"),
        ("for the locker you go 10 left, 22 right, 5 left", "10 left, 22 right, 5 left"),
        ("code to disarm: 4141", "4141"),
        ("logins are first name plus the year, so hers is priya2023", "priya2023"),
        ("p/w - Heron2020", "Heron2020"),
    ],
)  # fmt: skip
def test_a_secret_told_in_passing_is_redacted(text: str, secret: str) -> None:
    res = R.redact(text)
    assert secret not in res.text, res.text


@pytest.mark.parametrize(
    "text",
    [
        "if it asks for a password just use the one on the card",
        "the wifi dropped, try again later",
        "to sign in use okta, then open the app",
        "the code is in the wiki, use python3 to run it",
        "PIN? same as always, you know it",
        "the PIN is the same as the one from 2019",
        "for the station you go left, then right at the lights",
        "use a password manager, for instance",
        "to sign in use your work email",
    ],
)
def test_words_said_in_passing_near_a_password_are_kept(text: str) -> None:
    assert not R.redact(text).changed, R.redact(text).text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("did you reset the router?\nyes, new key's Otter&Moss7", "Otter&Moss7"),
        ("pin for the spare card four one one nine then sign the back", "four one one nine"),
    ],
)
def test_a_router_s_key_on_the_next_line_and_a_pin_read_out_are_redacted(
    text: str, secret: str
) -> None:
    res = R.redact(text)
    assert secret not in res.text, res.text


@pytest.mark.parametrize(
    "text",
    [
        "did you reset the router?\nthe key is under the mat",
        "the router key feature is new in v2",
        'aws iotwireless tag-resource \\\n    --tags Key="MyTag",Value="MyValue"',
        "pin for the spare card is in the post",
    ],
)
def test_a_router_s_key_named_and_no_value_is_kept(text: str) -> None:
    assert not R.redact(text).changed, R.redact(text).text


@pytest.mark.parametrize(
    "text",
    [
        '("cohere_compass", "CohereCompassConfig"),\n("qwen2_5_omni", "Qwen2_5OmniConfig"),',
        "['PKAddPassButton', 'PKAddPaymentPassRequest', 'MTLRenderPassDescriptor']",
        "self.user, self.passwd = user, passwd\nself.host, self.port = host, port",
        "filename = os.path.join(pwd, '..', 'tests', 'data')",
        "# used during the forward pass, so we use torch if relevant",
        "WW(G) = \\frac{1}{2} \\sum_{u,v} d(u, v)",
        "If your account supports EC2-Classic, Amazon EC2 launches it there.",
        "* typed arrays: add Uint8ClampedArray",
        "    # reset the parser's state#\n    def reset(self):",
        'client(api_key="your-replicate-api-key",  # Pass your Replicate API key',
    ],
)
def test_code_and_technical_prose_near_the_new_rules_are_kept(text: str) -> None:
    assert not R.redact(text).changed, R.redact(text).text
