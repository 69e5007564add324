"""Approvals end to end with software nobody here wrote: the official
Python SDK as the client, server-filesystem as the source, and Debian's
Chromium as the person's browser on the approval page."""

import json
import subprocess
from pathlib import Path

import anyio
import pytest

import mcp.types as types
from mcp import Client, StdioServerParameters

from conftest import AIRLOCK, ROOT, TOOLS, airlock_env

MODES = ["legacy", "2026-07-28"]
FACES = ["stdio", "http"]


def stdio(dirs) -> StdioServerParameters:
    return StdioServerParameters(
        command=str(AIRLOCK),
        args=["serve", "--config", str(dirs["config"])],
        env=airlock_env(dirs),
    )


def text_of(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def write(client, path: Path, content: str):
    return client.call_tool("fs__write_file", {"path": str(path), "content": content})


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("face", FACES)
def test_approval_in_the_clients_prompt_writes_the_file(asking_dir, request, face, mode):
    """The person allows the call in the SDK's elicitation callback (a form
    for legacy clients, an input request for 2026-07-28 ones), on stdio and
    on Streamable HTTP."""
    target = asking_dir["files"] / f"approved-{face}-{mode}.txt"
    server = stdio(asking_dir) if face == "stdio" else request.getfixturevalue("asking_http_url").transport()
    forms = []

    async def person(context, params):
        forms.append(params)
        return types.ElicitResult(action="accept", content={"decision": "allow_once"})

    async def run():
        async with Client(server, mode=mode, elicitation_callback=person) as client:
            result = await write(client, target, "a person said yes")
            assert not result.is_error, text_of(result)

    anyio.run(run)
    assert target.read_text() == "a person said yes"
    assert len(forms) == 1, forms
    assert "fs__write_file" in forms[0].message
    choices = [c["const"] for c in forms[0].requested_schema["properties"]["decision"]["oneOf"]]
    assert choices == ["allow_once", "allow_for_run", "always_allow", "deny"]


@pytest.mark.parametrize("mode", MODES)
def test_declining_in_the_clients_prompt_writes_nothing(asking_dir, mode):
    target = asking_dir["files"] / f"declined-{mode}.txt"

    async def person(context, params):
        return types.ElicitResult(action="decline")

    async def run():
        async with Client(stdio(asking_dir), mode=mode, elicitation_callback=person) as client:
            result = await write(client, target, "should not exist")
            assert result.is_error
            assert text_of(result) == "The user declined this tool call.", text_of(result)

    anyio.run(run)
    assert not target.exists(), "write_file reached the server"


def page_link(dirs) -> str:
    out = subprocess.run(
        [str(AIRLOCK), "page", "--print"],
        env=airlock_env(dirs),
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def click(link: str, tool: str, choice: str) -> dict:
    """A person in Chromium, via playwright-core (interop/browser/decide.mjs)."""
    out = subprocess.run(
        [str(TOOLS / "node_modules" / ".bin" / "node"), str(ROOT / "interop" / "browser" / "decide.mjs"), link, tool, choice],
        cwd=str(TOOLS),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("choice", ["allow_once", "deny"])
def test_person_decides_on_the_approval_page_in_chromium(asking_dir, choice):
    """A client that cannot show a form waits; the person clicks on the page."""
    target = asking_dir["files"] / f"page-{choice}.txt"
    outcome = {}

    async def run():
        async with Client(stdio(asking_dir), mode="legacy") as client:
            async with anyio.create_task_group() as tg:

                async def call():
                    outcome["result"] = await write(client, target, "clicked in a browser")

                tg.start_soon(call)
                await anyio.sleep(0.5)
                link = await anyio.to_thread.run_sync(page_link, asking_dir)
                outcome["page"] = await anyio.to_thread.run_sync(
                    click, link, "fs__write_file", choice
                )

    anyio.run(run)
    page = outcome["page"]
    assert page["seen"]["tool"] == "fs__write_file"
    assert "clicked in a browser" in page["seen"]["arguments"]
    assert page["seen"]["countdown"].startswith("in "), page
    assert page["seen"]["buttons"] == ["Allow once", "Allow for this run", "Always allow", "Deny"]
    result = outcome["result"]
    if choice == "deny":
        assert page["said"]["state"] == "denied", page
        assert text_of(result) == "The user declined this tool call."
        assert not target.exists()
    else:
        assert page["said"]["state"] == "approved", page
        assert not result.is_error, text_of(result)
        assert target.read_text() == "clicked in a browser"
