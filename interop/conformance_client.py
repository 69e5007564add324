"""airlock as the client under test of the MCP conformance suite.

The suite's client runner starts a scenario's server and runs this with its
URL as the last argument (`MCP_CONFORMANCE_SCENARIO` names the scenario,
`MCP_CONFORMANCE_CONTEXT` carries its data, `MCP_CONFORMANCE_PROTOCOL_VERSION`
the version asked for). What the server sees is airlock: this puts airlock
in front of the URL (a url source, reviewed by a person first, as a user
would) and drives the scenario through it with the official Python SDK as
the downstream client, on stdio."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio

import mcp.types as types
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
# The workspace binaries: scripts/test says which build (debug or release).
AIRLOCK = Path(os.environ.get("AIRLOCK_BIN_DIR", ROOT / "target" / "debug")) / "airlock"


def defaults_of(schema: dict) -> dict:
    """What a person accepting a form unchanged answers: each default."""
    return {
        name: prop["default"]
        for name, prop in (schema or {}).get("properties", {}).items()
        if "default" in prop
    }


async def on_elicit(context, params):
    schema = getattr(params, "requested_schema", None) or {}
    content = defaults_of(schema)
    if "confirmed" in schema.get("properties", {}):
        content["confirmed"] = True
    return types.ElicitResult(action="accept", content=content)


def text_of(result) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


async def call_each(client, names, arguments=None):
    for name in names:
        try:
            await client.call_tool(name, arguments or {})
        except Exception as e:  # a scenario's tool may fail on purpose
            print(f"{name}: {e}", file=sys.stderr)


async def drive(client, scenario: str, context: dict) -> None:
    tools = (await client.list_tools()).tools
    names = [t.name for t in tools]
    if scenario == "tools_call":
        await client.call_tool("add_numbers", {"a": 5, "b": 3})
    elif scenario == "json-schema-2020-12-preservation":
        focal = next(t for t in tools if "$schema" in (t.input_schema or {}))
        echo = next(t for t in tools if "schema" in (t.input_schema or {}).get("properties", {}))
        await client.call_tool(echo.name, {"schema": focal.input_schema})
    elif scenario == "http-custom-headers":
        for call in context.get("toolCalls", []):
            await call_each(client, [call["name"]], call.get("arguments"))
    elif scenario == "sep-2322-client-request-state":
        order = ["test_mrtr_echo_state", "test_mrtr_no_state", "test_mrtr_unrelated", "test_mrtr_no_result_type"]
        await call_each(client, [n for n in order if n in names])
    elif scenario in ("initialize", "request-metadata"):
        pass
    else:
        await call_each(client, names)
    if scenario == "http-standard-headers":
        for r in (await client.list_resources()).resources:
            await client.read_resource(r.uri)
        for p in (await client.list_prompts()).prompts:
            await client.get_prompt(p.name, {a.name: "x" for a in (p.arguments or [])})


def main() -> None:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
    modern = version >= "2026"
    work = Path(tempfile.mkdtemp(prefix="airlock-conformance-client-"))
    config = work / "airlock.toml"
    # The suite names tools and compares what it receives: names unprefixed,
    # results unquoted, as for a source the user trusts.
    config.write_text(
        f'[sources.s]\nurl = "{url}"\nallow_private = true\nprefix = false\nquote_output = false\n'
        f'protocol = "{"2026-07-28" if modern else "legacy"}"\n'
        '\n[[rules]]\naction = "allow"\nsource = "*"\n'
    )
    env = dict(os.environ, AIRLOCK_HOME=str(work / "home"), AIRLOCK_LOG="error", AIRLOCK_NO_BROWSER="1")
    subprocess.run(
        [str(AIRLOCK), "tools", "review", "--config", str(config), "--approve-all"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    server = StdioServerParameters(command=str(AIRLOCK), args=["serve", "--config", str(config)], env=env)

    async def run():
        async with Client(
            server,
            mode="2026-07-28" if modern else "legacy",
            elicitation_callback=on_elicit,
        ) as client:
            await drive(client, scenario, context)

    anyio.run(run)


if __name__ == "__main__":
    main()
