"""airlock as the OAuth client under test of the MCP conformance suite's
auth scenarios.

The suite's client runner starts a scenario's MCP server and authorization
server and runs this with the server's URL as the last argument
(`MCP_CONFORMANCE_SCENARIO` names the scenario, `MCP_CONFORMANCE_CONTEXT`
carries its data, such as a pre-registered client). This does what a person
would: writes a config with the URL as a url source, logs in with
`airlock auth login --no-browser` (the suite's authorization server
approves at once and redirects to airlock's loopback listener, so following
the printed URL is the whole of the person's part), reviews the tools, and
then lists and calls them through airlock with the official Python SDK as
the downstream client. A call answered with "needs you to log in" (a 403
asking for more scope) is followed by another login, as a person would,
until airlock itself stops asking."""

import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import anyio

from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
AIRLOCK = Path(os.environ.get("AIRLOCK_BIN_DIR", ROOT / "target" / "debug")) / "airlock"
# A person logs in again when told to; airlock stops asking for more scope
# after three step-ups, so a fourth round only shows that it did.
MAX_LOGINS = 5


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def follow_login(url: str) -> None:
    """The browser's part: open the authorization URL (the suite's server
    approves at once and redirects), then deliver the redirect."""
    opener = urllib.request.build_opener(NoRedirect)
    try:
        response = opener.open(url, timeout=20)
        location = response.headers.get("Location")
    except urllib.error.HTTPError as e:
        location = e.headers.get("Location")
    if not location:
        print("the authorization server did not redirect", file=sys.stderr)
        return
    try:
        urllib.request.urlopen(location, timeout=20).read()
    except urllib.error.HTTPError as e:
        print(f"the redirect was refused: {e.code}", file=sys.stderr)


def login(config: Path, env: dict) -> bool:
    proc = subprocess.Popen(
        [str(AIRLOCK), "auth", "login", "s", "--config", str(config), "--no-browser"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    url = proc.stdout.readline().strip()
    if url:
        follow_login(url)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return False
    return code == 0


def main() -> None:
    url = sys.argv[-1]
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
    modern = version >= "2026"
    work = Path(tempfile.mkdtemp(prefix="airlock-conformance-auth-"))
    env = dict(
        os.environ,
        AIRLOCK_HOME=str(work / "home"),
        AIRLOCK_LOG="error",
        AIRLOCK_NO_BROWSER="1",
        # The suite's runs are throwaway: the private file, not the keychain.
        AIRLOCK_SECRET_STORE="file",
    )
    oauth = ""
    if context.get("client_id"):
        oauth += f'client_id = "{context["client_id"]}"\n'
        if context.get("client_secret"):
            subprocess.run(
                [str(AIRLOCK), "secret", "set", "conformance-client"],
                input=context["client_secret"],
                text=True,
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            oauth += 'client_secret = "secret:conformance-client"\n'
    # airlock's Client ID Metadata Document, as a user would configure it:
    # the suite's authorization servers expect this test address, and use
    # it only where they advertise such documents.
    oauth += 'client_metadata_url = "https://conformance-test.local/client-metadata.json"\n'
    config = work / "airlock.toml"
    config.write_text(
        f'[sources.s]\nurl = "{url}"\nallow_private = true\nprefix = false\nquote_output = false\n'
        f'protocol = "{"2026-07-28" if modern else "legacy"}"\n'
        + f"\n[sources.s.oauth]\n{oauth}"
        + '\n[[rules]]\naction = "allow"\nsource = "*"\n'
    )
    def review() -> tuple:
        """Whether every tool was reviewed, and whether airlock asked for a
        login instead."""
        done = subprocess.run(
            [str(AIRLOCK), "tools", "review", "--config", str(config), "--approve-all"],
            env=env,
            capture_output=True,
            text=True,
        )
        return done.returncode == 0, "needs you to log in" in done.stdout + done.stderr

    # As a person meets it: the source fails to start until it is logged
    # in (a server that asks at once, or again after it moved to another
    # authorization server), or a call says to log in (one that asks only
    # when a tool is called). A person logs in when airlock says to, and
    # only then.
    for _ in range(MAX_LOGINS):
        reviewed, asked = review()
        if reviewed:
            break
        if not asked:
            sys.exit("the tools could not be reviewed, and airlock did not ask for a login")
        if not login(config, env):
            sys.exit("airlock did not log in")
    else:
        sys.exit("the tools could not be reviewed after logging in")

    async def calls() -> bool:
        """Lists and calls every tool; whether a call asked for a login."""
        server = StdioServerParameters(command=str(AIRLOCK), args=["serve", "--config", str(config)], env=env)
        async with Client(server, mode="2026-07-28" if modern else "legacy") as client:
            tools = (await client.list_tools()).tools
            asked = False
            for tool in tools:
                result = await client.call_tool(tool.name, {})
                text = " ".join(getattr(c, "text", "") for c in result.content)
                if "needs you to log in" in text:
                    asked = True
            return asked

    for _ in range(MAX_LOGINS):
        if not anyio.run(calls):
            return
        if not login(config, env):
            return


if __name__ == "__main__":
    main()
