"""`atelier mcp` driven by the official MCP Python SDK (PyPI `mcp`), as a desktop host would:
over stdio (the server is started as a child process) or, with MCP_URL, over streamable HTTP.

Lists the tools, queries a table, writes into the draft, reads a resource, and is refused a
traversal, a missing file and an unknown workbench (tool results with `isError`, SEP-1303) and
an unknown tool (a JSON-RPC error); prints `RESULT {json}` for tests/tests/mcp.rs.

Environment: ATELIER_BIN, ATELIER_DATA, WORKDIR (stdio), or MCP_URL (+ MCP_TOKEN) for HTTP.
"""

import asyncio
import json
import os

import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


async def refused_code(session, tool, arguments):
    """Atelier's code of a call refused as a tool result (`isError`, the code in
    `structuredContent.error.code` and at the head of the text the model reads), or what came
    back instead."""
    try:
        result = await session.call_tool(tool, arguments)
    except MCPError as error:
        return f"a JSON-RPC error: {error.code} {error.message}"
    if not result.is_error:
        return f"not refused: {result.structured_content}"
    code = (result.structured_content or {}).get("error", {}).get("code")
    text = result.content[0].text if result.content else ""
    if not text.startswith(f"{code}: "):
        return f"the text does not name {code}: {text}"
    return code


async def protocol_error(session, tool, arguments):
    """The JSON-RPC error code and Atelier's code of a call refused at the protocol level."""
    try:
        result = await session.call_tool(tool, arguments)
    except MCPError as error:
        return [error.code, (error.data or {}).get("code")]
    return f"not a JSON-RPC error: {result}"


async def drive(session):
    await session.initialize()
    result = {}
    tools = (await session.list_tools()).tools
    by_name = {tool.name: tool for tool in tools}
    result["has_tools"] = sorted(
        name for name in ("read_file", "table_query", "write_text_file", "draft_diff", "submit_job") if name in by_name
    )
    result["read_only_hint"] = by_name["read_file"].annotations.read_only_hint
    result["destructive_hint"] = by_name["delete_file"].annotations.destructive_hint

    query = "SELECT SUM(revenue) AS total FROM data"
    total = await session.call_tool("table_query", {"workbench": "q3", "path": "sales.csv", "query": query})
    result["total"] = total.structured_content["rows"][0][0]

    written = await session.call_tool(
        "write_text_file", {"workbench": "q3", "path": "py-notes.md", "content": "From Python.\n"}
    )
    result["write_state"] = written.structured_content["state"]
    review = await session.call_tool("draft_diff", {"workbench": "q3"})
    result["draft_added"] = review.structured_content["added"]

    resources = (await session.list_resources()).resources
    result["resources"] = sorted(str(resource.uri) for resource in resources)
    sales = await session.read_resource("atelier://q3/sales.csv")
    result["sales_head"] = sales.contents[0].text.splitlines()[0]

    result["traversal"] = await refused_code(
        session, "write_text_file", {"workbench": "q3", "path": "../../escape.txt", "content": "x"}
    )
    result["unknown_workbench"] = await refused_code(session, "read_file", {"workbench": "nope", "path": "a.txt"})
    result["outside"] = await refused_code(session, "read_file", {"workbench": "q3", "path": "../x.csv"})
    result["missing"] = await refused_code(session, "read_file", {"workbench": "q3", "path": "missing.csv"})
    result["unknown_tool"] = await protocol_error(session, "format_disk", {"workbench": "q3"})
    return result


async def main():
    url = os.environ.get("MCP_URL")
    if url:
        headers = {"Authorization": f"Bearer {os.environ['MCP_TOKEN']}"} if os.environ.get("MCP_TOKEN") else {}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            async with streamable_http_client(url, http_client=http) as (read, write, *_):
                async with ClientSession(read, write) as session:
                    return await drive(session)
    server = StdioServerParameters(
        command=os.environ["ATELIER_BIN"],
        args=["mcp", "--data", os.environ["ATELIER_DATA"]],
        cwd=os.environ["WORKDIR"],
    )
    async with stdio_client(server) as (read, write, *_):
        async with ClientSession(read, write) as session:
            return await drive(session)


if __name__ == "__main__":
    print("RESULT " + json.dumps(asyncio.run(main())), flush=True)
