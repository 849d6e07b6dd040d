"""Runs a list of tool calls against `elfiee mcp-server` with the official MCP Python SDK.

Usage: mcp_script.py --bin ELFIEE --elf DOC --editor EDITOR --calls JSON
where JSON is `[{"name": TOOL, "arguments": {...}}, ...]`; `$N.field` in a string argument is
replaced by that field of call N's structured result. Prints `{"results": [...]}` (each call's
is_error, structured_content, text) on stdout. Used by tests/agent_project.rs.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def substitute(value: Any, results: list[dict[str, Any]]) -> Any:
    if isinstance(value, str):
        m = re.fullmatch(r"\$(\d+)\.(\w+)", value)
        if m:
            return (results[int(m.group(1))]["structured_content"] or {}).get(m.group(2))
        return value
    if isinstance(value, dict):
        return {k: substitute(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, results) for v in value]
    return value


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--elf", required=True)
    p.add_argument("--editor", required=True)
    p.add_argument("--calls", required=True)
    args = p.parse_args()
    params = StdioServerParameters(
        command=args.bin,
        args=["--elf", args.elf, "mcp-server", "--editor", args.editor],
        env={"NO_COLOR": "1"},
    )
    results: list[dict[str, Any]] = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=120) as s:
            await s.initialize()
            for call in json.loads(args.calls):
                r = await s.call_tool(call["name"], substitute(call.get("arguments", {}), results))
                results.append(
                    {
                        "is_error": bool(r.is_error),
                        "structured_content": r.structured_content,
                        "text": "\n".join(getattr(c, "text", "") for c in r.content),
                    }
                )
    print(json.dumps({"results": results}))


if __name__ == "__main__":
    anyio.run(main)
