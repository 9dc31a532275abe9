"""Token counting for budgets (`.query` bundles, a session's `context.md`).

One estimator everywhere, so a budget means the same thing wherever it is applied.
"""

from __future__ import annotations

import math


def estimate_tokens(text: str) -> int:
    """The token estimator used for budgets: one token per four characters, rounded up."""
    return math.ceil(len(text) / 4)
