"""Memory from conversations: the inbox, transcripts, extraction (rules and the LLM client)
and sessions. Add an inbox format or an extraction rule here; routing what is extracted is
the memory service's job (`contextfs.memory`)."""
