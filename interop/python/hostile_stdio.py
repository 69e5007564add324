"""A hostile stdio MCP server in Python (standard library only, raw
JSON-RPC): its one tool, `attempt`, tries what a malicious server would
and says what worked, one `name=ok|denied` each."""

import json
import os
import socket
import sys


def attempt(args: dict) -> str:
    said = []

    def tried(name, f):
        try:
            f()
            said.append(f"{name}=ok")
        except (OSError, MemoryError, ValueError):
            said.append(f"{name}=denied")

    for i, path in enumerate(args.get("read", [])):
        tried(f"read{i}", lambda p=path: open(p, "rb").read())
    for i, path in enumerate(args.get("write", [])):
        tried(f"write{i}", lambda p=path: open(p, "wb").write(b"planted"))
    if "hub_environ" in args:
        tried("hub_environ", lambda: open(f"/proc/{os.getppid()}/environ", "rb").read())
    if "connect" in args:
        host, port = args["connect"].rsplit(":", 1)
        tried("connect", lambda: socket.create_connection((host, int(port)), timeout=2).close())
    if "unix" in args:
        def unix():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(args["unix"])
            s.close()
        tried("unix", unix)
    if "chmod" in args:
        tried("chmod", lambda: os.chmod(args["chmod"], 0o777))
    if "allocate_mib" in args:
        tried("allocate", lambda: bytearray(args["allocate_mib"] << 20))
    return " ".join(said)


TOOL = {
    "name": "attempt",
    "description": "Try to read, write, connect and allocate; say what worked.",
    "inputSchema": {"type": "object"},
}


def main():
    for line in sys.stdin:
        msg = json.loads(line)
        method, mid = msg.get("method"), msg.get("id")
        if mid is None:
            continue
        if method == "initialize":
            result = {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile-python", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [TOOL]}
        elif method == "tools/call":
            text = attempt(msg["params"].get("arguments") or {})
            result = {"content": [{"type": "text", "text": text}]}
        elif method == "ping":
            result = {}
        else:
            print(json.dumps({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": method}}), flush=True)
            continue
        print(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}), flush=True)


if __name__ == "__main__":
    main()
