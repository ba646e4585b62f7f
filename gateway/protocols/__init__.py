"""The other protocols the gateway speaks beside the LangGraph Platform API: MCP
(`mcp.py`) and A2A (`a2a/`), both JSON-RPC over HTTP (`jsonrpc.py`), each call
turned into the same runs as the API's."""
