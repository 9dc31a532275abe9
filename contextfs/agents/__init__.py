"""The mount's clients for agents: the Python API (`client`), the MCP server (`mcpserver`),
the memory-tool adapter (`memorytool`) and what they share (`mountcalls`). Each is a client
of a mounted path, as a shell is; none imports the daemon's internals."""
