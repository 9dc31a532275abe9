"""The memory service: documents, merge strategies, summaries and routing of writes."""
