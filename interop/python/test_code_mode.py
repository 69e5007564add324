"""Code mode end to end with software nobody here wrote: the official
Python SDK as the client and server-filesystem as the source. The model's
program reads a file (allowed), then writes one (asks); the run pauses, a
person approves in the terminal, and the resumed run writes the file once,
without reading again."""

import json
import subprocess

import anyio
import pytest

from mcp import Client, StdioServerParameters

from conftest import AIRLOCK, _npm_bin, airlock_env, review

MODES = ["legacy", "2026-07-28"]


@pytest.fixture
def code_dir(tmp_path):
    files = (tmp_path / "files").resolve()
    files.mkdir()
    (files / "in.txt").write_text("from the source")
    config = tmp_path / "airlock.toml"
    config.write_text(
        f"""
[hub]
code_mode = "only"
approval_wait = "1s"
approval_ttl = "60s"
approval_page = "off"

[sources.fs]
command = "{_npm_bin('mcp-server-filesystem')}"
args = ["{files}"]

[[rules]]
action = "allow"
tool = "fs__read_text_file"
"""
    )
    dirs = {"base": tmp_path, "config": config, "files": files, "home": tmp_path / "home"}
    review(dirs)
    return dirs


def words(result) -> dict:
    """airlock's words about the run (the first block, JSON)."""
    return json.loads(result.content[0].text)


def airlock_cli(dirs, *args) -> str:
    out = subprocess.run(
        [str(AIRLOCK), *args], env=airlock_env(dirs), capture_output=True, text=True, check=True
    )
    return out.stdout


def pending_id(dirs) -> str:
    for line in airlock_cli(dirs, "pending").splitlines():
        if " pending " in line:
            return line.split()[0]
    raise AssertionError("no approval is pending")


@pytest.mark.parametrize("mode", MODES)
def test_a_paused_run_is_approved_and_resumed_through_the_python_sdk(code_dir, mode):
    target = StdioServerParameters(
        command=str(AIRLOCK),
        args=["serve", "--config", str(code_dir["config"])],
        env=airlock_env(code_dir),
    )
    out = code_dir["files"] / "out.txt"
    code = f"""
        const text = await tools.fs.read_text_file({{ path: {json.dumps(str(code_dir['files'] / 'in.txt'))} }});
        await tools.fs.write_file({{ path: {json.dumps(str(out))}, content: 'copied' }});
        return typeof text === 'string' ? 'read text' : 'read ' + JSON.stringify(text).length + ' bytes';
    """

    async def run():
        async with Client(target, mode=mode) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == ["search_tools", "run_code", "resume_run"], names
            found = await client.call_tool("search_tools", {"query": "write file"})
            assert "tools.fs.write_file" in found.content[0].text, found
            paused = await client.call_tool("run_code", {"code": code})
            said = words(paused)
            assert said["status"] == "paused", said
            assert not out.exists(), "the write ran before anyone approved it"
            airlock_cli(code_dir, "approve", pending_id(code_dir))
            done = await client.call_tool("resume_run", {"run_id": said["run_id"]})
            assert words(done)["status"] == "finished", done
            assert out.read_text() == "copied"
            journal = airlock_cli(code_dir, "runs", "show", said["run_id"])
            assert "#1  fs__read_text_file  settled" in journal, journal
            assert "#2  fs__write_file" in journal and "#3" not in journal, journal

    anyio.run(run)
