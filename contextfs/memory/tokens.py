"""Token counting for budgets (`.query` bundles, a session's `context.md`) and for the
context window of an LLM request.

One estimator everywhere for budgets, so a budget means the same thing wherever it is
applied. A model's context window is a hard limit (an endpoint refuses a request that
passes it), so requests are measured with an upper bound instead.
"""

from __future__ import annotations

import math

_DIGITS = tuple(range(ord("0"), ord("9") + 1))


def estimate_tokens(text: str) -> int:
    """The token estimator used for budgets: one token per four characters, rounded up."""
    return math.ceil(len(text) / 4)


def estimate_tokens_upper(text: str) -> int:
    """An over-estimate of what a model's tokenizer makes of `text`: one token per three
    bytes of UTF-8 and every digit a token of its own (some tokenizers split numbers digit
    by digit). English prose and JSON come out about a third above real BPE counts; no
    common tokenizer averages fewer bytes a token outside runs of rare symbols."""
    data = text.encode("utf-8", "surrogatepass")
    digits = sum(data.count(d) for d in _DIGITS)
    return math.ceil((len(data) - digits) / 3) + digits
