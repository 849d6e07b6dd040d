"""Drives `elfiee mcp-server` with the official MCP Python SDK (mcp 2.x) as the client.

Run by tests/mcp_e2e.rs with the interpreter of `.venv` (made by scripts/test). Two sessions:

1. classic: `initialize` + `notifications/initialized`, ping, tools/list, create / write / read a
   markdown block, a refused delete, links, history, resources, list_changed notifications, then
   bad input (unknown tool, wrong argument types, missing arguments, a 20 MB argument) and a
   check that the server still answers.
2. modern (2026-07-28): `server/discover`, tools/list and a tool call with per-request `_meta`,
   and a `subscriptions/listen` stream that reports the change.

Prints one JSON object with everything it saw on stdout; the Rust test asserts on it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.subscriptions import listen
from mcp.shared.exceptions import MCPError

TEXT = "# Agent notes\n\nWritten through MCP by the agent editor.\n"


def dump(result: Any) -> dict[str, Any]:
    """The parts of a CallToolResult the Rust test checks (mcp 2.x field names: snake_case)."""
    return {
        "is_error": bool(result.is_error),
        "structured_content": result.structured_content,
        "text": "\n".join(getattr(c, "text", "") for c in result.content),
    }


async def call(session: ClientSession, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool call whose outcome is recorded whether it is a result or a protocol error."""
    started = time.monotonic()
    try:
        out = dump(await session.call_tool(name, arguments))
    except MCPError as e:
        out = {"protocol_error": {"code": e.code, "message": e.message}}
    out["seconds"] = round(time.monotonic() - started, 3)
    return out


def server(args: argparse.Namespace) -> StdioServerParameters:
    return StdioServerParameters(
        command=args.bin,
        args=["--elf", args.elf, "mcp-server", "--editor", args.editor],
        env={"RUST_LOG": "info", "NO_COLOR": "1"},
    )


async def classic(args: argparse.Namespace, out: dict[str, Any]) -> None:
    notes: list[str] = []

    async def on_message(message: Any) -> None:
        notes.append(f"exception: {message}" if isinstance(message, Exception) else message.method)

    async with stdio_client(server(args)) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=120, message_handler=on_message) as s:
            init = await s.initialize()
            out["initialize"] = {
                "protocol_version": init.protocol_version,
                "server_name": init.server_info.name,
                "resources_list_changed": bool(init.capabilities.resources and init.capabilities.resources.list_changed),
            }
            await s.send_ping()
            tools = await s.list_tools()
            out["tools"] = [t.name for t in tools.tools]
            out["required"] = {t.name: t.input_schema.get("required", []) for t in tools.tools}

            created = await call(s, "elfiee_block_create", {"block_type": "markdown", "name": "Agent notes"})
            out["create"] = created
            block = created["structured_content"]["block_id"]
            out["write"] = await call(s, "elfiee_markdown_write", {"block_id": block, "markdown": TEXT})
            out["get"] = await call(s, "elfiee_block_get", {"block_id": block})
            out["link"] = await call(
                s, "elfiee_block_link", {"from": block, "to": args.owner_block, "relation": "reference"}
            )
            out["get_owner_block"] = await call(s, "elfiee_block_get", {"block_id": args.owner_block})
            out["delete_denied"] = await call(s, "elfiee_block_delete", {"block_id": args.owner_block})
            out["write_denied"] = await call(
                s, "elfiee_markdown_write", {"block_id": args.owner_block, "markdown": "overwritten"}
            )
            out["history"] = await call(s, "elfiee_block_history", {"block_id": block})
            out["list"] = await call(s, "elfiee_block_list", {})
            out["propose"] = await call(
                s,
                "elfiee_propose",
                {"commands": [{"cap_id": "markdown.write", "block_id": block, "payload": {"markdown": "x"}}], "description": "later"},
            )
            out["proposal_list"] = await call(s, "elfiee_proposal_list", {})

            resources = await s.list_resources()
            out["resources"] = [r.uri for r in resources.resources]
            read = await s.read_resource(f"elfiee://block/{block}")
            out["resource_text"] = read.contents[0].text
            read = await s.read_resource("elfiee://blocks")
            out["resource_blocks"] = json.loads(read.contents[0].text)

            with anyio.move_on_after(10):
                while "notifications/resources/list_changed" not in notes:
                    await anyio.sleep(0.05)
            out["notifications"] = list(notes)

            # Bad input: each gets an answer, and the session goes on.
            bad: dict[str, Any] = {}
            bad["unknown_tool"] = await call(s, "elfiee_no_such_tool", {})
            bad["wrong_types"] = await call(s, "elfiee_markdown_write", {"block_id": 5, "markdown": ["x"]})
            bad["missing_argument"] = await call(s, "elfiee_block_get", {})
            bad["unknown_argument"] = await call(s, "elfiee_block_get", {"block_id": block, "blockid": block})
            bad["bad_relation"] = await call(
                s, "elfiee_block_link", {"from": block, "to": args.owner_block, "relation": "parent"}
            )
            bad["missing_block"] = await call(s, "elfiee_block_get", {"block_id": "no-such-block"})
            bad["huge_argument"] = await call(
                s, "elfiee_markdown_write", {"block_id": block, "markdown": "x" * 20_000_000}
            )
            await s.send_ping()
            bad["still_serving"] = await call(s, "elfiee_block_get", {"block_id": block})
            out["bad"] = bad


async def modern(args: argparse.Namespace, out: dict[str, Any]) -> None:
    async with stdio_client(server(args)) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=120) as s:
            found = await s.discover()
            m: dict[str, Any] = {
                "supported_versions": list(found.supported_versions),
                "protocol_version": s.protocol_version,
            }
            m["tools"] = [t.name for t in (await s.list_tools()).tools]
            async with listen(s, resources_list_changed=True) as sub:
                created = await call(s, "elfiee_block_create", {"block_type": "code", "name": "modern.rs"})
                m["create"] = created
                block = created["structured_content"]["block_id"]
                m["write"] = await call(s, "elfiee_code_write", {"block_id": block, "text": "fn main() {}\n", "language": "rust"})
                with anyio.fail_after(10):
                    event = await sub.__anext__()
                m["event"] = type(event).__name__
            m["get"] = await call(s, "elfiee_block_get", {"block_id": block})
            out["modern"] = m


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--elf", required=True)
    p.add_argument("--editor", required=True)
    p.add_argument("--owner-block", required=True)
    args = p.parse_args()
    out: dict[str, Any] = {}
    try:
        await classic(args, out)
        await modern(args, out)
    except BaseException as e:  # report what was done so far, then fail
        out["failure"] = f"{type(e).__name__}: {e}"
        print(json.dumps(out))
        raise
    print(json.dumps(out))


if __name__ == "__main__":
    anyio.run(main)
    sys.exit(0)
