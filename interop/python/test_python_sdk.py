"""The official Python MCP SDK as a client of airlock, on both faces, with
the legacy handshake and with 2026-07-28, in front of the official npm
servers (server-everything, server-filesystem) and the shipped demo."""

import anyio
import pytest

import mcp.types as types
from mcp import Client, StdioServerParameters

from conftest import AIRLOCK, airlock_env

FACES = ["stdio", "http"]
MODES = ["legacy", "2026-07-28"]


def target(face, hub_dir, http_url):
    if face == "http":
        return http_url.transport()
    return StdioServerParameters(
        command=str(AIRLOCK),
        args=["serve", "--config", str(hub_dir["config"])],
        env=airlock_env(hub_dir),
    )


def text_of(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


@pytest.fixture
def connect(hub_dir, request):
    """connect(face, mode, **kwargs) -> Client for use in `async with`."""

    def make(face, mode, **kwargs):
        url = request.getfixturevalue("http_url") if face == "http" else None
        return Client(target(face, hub_dir, url), mode=mode, **kwargs)

    return make


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("face", FACES)
def test_every_source_is_listed_and_callable(connect, face, mode):
    async def run():
        async with connect(face, mode) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            for name in ["demo__read_note", "everything__echo", "fs__read_text_file"]:
                assert name in tools, sorted(tools)
            assert tools["demo__read_note"].annotations.read_only_hint is True
            result = await client.call_tool("everything__echo", {"message": "through airlock"})
            assert "through airlock" in text_of(result)
            result = await client.call_tool("demo__read_note", {"name": "welcome"})
            assert "Reads flow" in text_of(result)

    anyio.run(run)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("face", FACES)
def test_filesystem_server_reads_through_airlock(connect, hub_dir, face, mode):
    async def run():
        async with connect(face, mode) as client:
            path = str(hub_dir["files"] / "hello.txt")
            result = await client.call_tool("fs__read_text_file", {"path": path})
            assert "hello from the filesystem server" in text_of(result)

    anyio.run(run)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("face", FACES)
def test_elicitation_reaches_the_python_callback_and_back(connect, face, mode):
    asked = []

    async def on_elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace"})

    async def run():
        async with connect(face, mode, elicitation_callback=on_elicit) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert "everything__trigger-elicitation-request" in names, names
            result = await client.call_tool("everything__trigger-elicitation-request", {})
            assert not result.is_error, text_of(result)
            assert "Ada Lovelace" in text_of(result), text_of(result)

    anyio.run(run)
    assert asked, "the elicitation callback was never called"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("face", FACES)
def test_streamable_http_source_through_airlock(connect, face, mode):
    """server-everything reached over Streamable HTTP as an upstream."""

    async def run():
        async with connect(face, mode) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert "everything-http__echo" in names, names
            result = await client.call_tool("everything-http__echo", {"message": "over http"})
            assert "over http" in text_of(result)
            result = await client.call_tool("everything-http__get-sum", {"a": 2, "b": 40})
            assert "42" in text_of(result)

    anyio.run(run)


@pytest.mark.parametrize("face", FACES)
def test_unknown_tool_is_an_error_naming_the_closest(connect, face):
    async def run():
        async with connect(face, "legacy") as client:
            with pytest.raises(Exception) as err:
                await client.call_tool("everything__echoo", {"message": "x"})
            assert "everything__echo" in str(err.value)

    anyio.run(run)


@pytest.mark.parametrize("mode", MODES)
def test_default_policy_write_file_never_creates_its_file(default_policy_dir, mode):
    """With no rules, a write asks; until a person approves, nothing is written."""
    target_file = default_policy_dir["files"] / f"created-{mode}.txt"
    params = StdioServerParameters(
        command=str(AIRLOCK),
        args=["serve", "--config", str(default_policy_dir["config"])],
        env=airlock_env(default_policy_dir),
    )

    async def run():
        async with Client(params, mode=mode) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert "approval" in tools["fs__write_file"].description
            result = await client.call_tool(
                "fs__write_file", {"path": str(target_file), "content": "should not exist"}
            )
            assert result.is_error
            assert text_of(result) == "The user did not approve this tool call in time.", text_of(result)

    anyio.run(run)
    assert not target_file.exists(), "write_file reached the server"


@pytest.mark.parametrize("mode", MODES)
def test_http_face_refuses_a_client_without_the_token(http_url, mode):
    """Another local user can reach 127.0.0.1 but cannot read the token:
    with no token, or a wrong one, the SDK cannot even initialize, while
    the same client with the token works."""
    import urllib.error
    import urllib.request

    from conftest import HttpHub

    async def attempt(server):
        async with Client(server, mode=mode) as client:
            await client.list_tools()

    anyio.run(attempt, http_url.transport())  # control: the token works
    wrong = [HttpHub(http_url.url, "airlock_" + "0" * 64), HttpHub(http_url.url, http_url.token[:-1])]
    for server in [http_url.url] + [h.transport() for h in wrong]:
        with pytest.raises(Exception):
            anyio.run(attempt, server)
    # What the SDK saw, at the HTTP level: 401 before anything was read.
    request = urllib.request.Request(
        http_url.url,
        data=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401
