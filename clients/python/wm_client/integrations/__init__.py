"""Integrations of the Python client with agent frameworks, each behind its own extra so the
core client stays gRPC and protobuf only:

- ``mcp_server``: ``wm-mcp``, the service as an MCP server (``wm-client[mcp]``);
- ``openai_agents``: an OpenAI Agents SDK ``Session`` (``wm-client[openai-agents]``);
- ``langchain``: a LangChain chat history, a LangGraph store and pre-model hook
  (``wm-client[langchain]``);
- ``llamaindex``: a LlamaIndex memory block (``wm-client[llamaindex]``).

Import a module only with its extra installed: each imports its framework at the top.
"""
