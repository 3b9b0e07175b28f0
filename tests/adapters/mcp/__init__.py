"""Tests of polyloop.adapters.mcp against a real MCP server process."""
