"""A tool result as one observation text: text blocks as they are, other blocks named."""

from __future__ import annotations

import json

from mcp import types as mcp_types

__all__ = ["result_text"]


def _placeholder(block: object) -> str:
    """A non-text block, named (kind, MIME type, size) instead of shown."""
    kind = getattr(block, "type", type(block).__name__)
    resource = getattr(block, "resource", None)
    mime = getattr(resource if resource is not None else block, "mime_type", None)
    data = getattr(block, "data", None) or getattr(resource, "blob", None)
    details = [mime] if mime else []
    if isinstance(data, str):
        details.append(f"{len(data)} characters of base64")
    uri = getattr(block, "uri", None) or getattr(resource, "uri", None)
    if uri is not None:
        details.append(str(uri))
    inside = f" ({', '.join(details)})" if details else ""
    return f"[{kind} content{inside} not shown]"


def result_text(result: mcp_types.CallToolResult) -> str:
    """The result as one text: text blocks (and embedded text resources) as they are, any other
    block as a placeholder naming it, structured content as JSON when there is nothing else."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.EmbeddedResource) and isinstance(
            block.resource, mcp_types.TextResourceContents
        ):
            parts.append(block.resource.text)
        else:
            parts.append(_placeholder(block))
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, sort_keys=True, ensure_ascii=False)
    return "\n".join(parts)
