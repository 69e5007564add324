//! A plain keep-alive HTTP/1.1 client on one connection, written on the
//! standard library's blocking socket, as simple scripts and many HTTP
//! libraries are: it reads each response to its end before sending the
//! next request, so a server that leaves Nagle on (no `TCP_NODELAY`)
//! makes it wait for a delayed ACK on every call. SDK clients, which
//! stream, hide that.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use serde_json::{Value, json};

/// A response's headers and body.
type Response = (Vec<(String, String)>, Vec<u8>);

/// One connection, one session: sends `calls` sequential `tools/call`s of
/// `tool` and returns each call's time in µs, sorted.
pub(crate) fn run(
    port: u16,
    token: Option<&str>,
    tool: &str,
    calls: usize,
) -> anyhow::Result<Vec<f64>> {
    let stream = TcpStream::connect(("127.0.0.1", port))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let mut session: Option<String> = None;
    let mut post = |body: Value, session: &Option<String>| -> anyhow::Result<Response> {
        let body = body.to_string();
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(t) = token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        if let Some(s) = session {
            head.push_str(&format!(
                "Mcp-Session-Id: {s}\r\nMcp-Protocol-Version: 2025-11-25\r\n"
            ));
        }
        // Head and body in one write, as Python's http.client sends a
        // small body: two writes would meet the client's own Nagle.
        head.push_str("\r\n");
        head.push_str(&body);
        writer.write_all(head.as_bytes())?;
        writer.flush()?;
        read_response(&mut reader)
    };
    let (headers, _) = post(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "keep-alive", "version": "1"}}}),
        &session,
    )?;
    session = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("mcp-session-id"))
        .map(|(_, v)| v.clone());
    post(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        &session,
    )?;
    let mut times = Vec::with_capacity(calls);
    for i in 0..calls {
        let started = Instant::now();
        let (_, body) = post(
            json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                "params": {"name": tool, "arguments": {"text": "ping"}}}),
            &session,
        )?;
        times.push(started.elapsed().as_secs_f64() * 1e6);
        if !String::from_utf8_lossy(&body).contains("ping") {
            anyhow::bail!("unexpected answer: {}", String::from_utf8_lossy(&body));
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

/// One response, read to its end (by length, or chunk by chunk).
fn read_response(reader: &mut BufReader<TcpStream>) -> anyhow::Result<Response> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    if !line.starts_with("HTTP/1.1 2") {
        anyhow::bail!("the server answered {}", line.trim());
    }
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let mut body = Vec::new();
    if let Some(n) = header("content-length") {
        body.resize(n.parse()?, 0);
        reader.read_exact(&mut body)?;
    } else if header("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16)?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk)?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
    Ok((headers, body))
}
