"""The domain: nodes and their versions, documents, write strategies and routing, summaries,
tokens, redaction at the write boundary, and consolidation. Add a write strategy here."""
