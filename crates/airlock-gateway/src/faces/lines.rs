//! Newline-delimited JSON-RPC for the stdio face, answering bad input.
//!
//! rmcp's own line transport drops a line it cannot parse, which leaves the
//! client waiting forever. Here a line that is not JSON gets a `-32700`
//! parse error, JSON that is not a JSON-RPC message gets `-32600` (with the
//! request's id when one can be read), and an oversized line gets `-32600`
//! and is skipped without being buffered whole. The session stays up.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

pub struct LineTransport<R, W> {
    reader: R,
    writer: Arc<Mutex<W>>,
    max_line: usize,
    /// The line being read. It survives a `receive` that is dropped
    /// half-way (the SDK's loop selects over it with other events), so a
    /// line that arrives in pieces is never lost: it is cleared only once
    /// it has been handed on.
    buf: Vec<u8>,
    /// Bytes of the current line skipped for being over the limit.
    skipped: usize,
    /// The line in `buf` was handed on; start a new one.
    delivered: bool,
    /// Cancelled when the input ends: the client is gone.
    ended: tokio_util::sync::CancellationToken,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncBufRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub fn new(reader: R, writer: W, max_line: usize) -> Self {
        LineTransport {
            reader,
            writer: Arc::new(Mutex::new(writer)),
            max_line,
            buf: Vec::new(),
            skipped: 0,
            delivered: false,
            ended: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// Cancels `ended` when the input ends (EOF or a read error), as soon
    /// as it does, before the SDK drains what is still in flight.
    pub fn ending(mut self, ended: tokio_util::sync::CancellationToken) -> Self {
        self.ended = ended;
        self
    }

    async fn write_line(writer: &Arc<Mutex<W>>, line: Vec<u8>) -> std::io::Result<()> {
        let mut w = writer.lock().await;
        w.write_all(&line).await?;
        w.write_all(b"\n").await?;
        w.flush().await
    }

    /// Answers a malformed message from a task of its own, so that a
    /// `receive` dropped half-way (see `buf`) can neither lose the answer
    /// nor leave half of it on the wire; each line is written whole under
    /// the writer's lock.
    fn reply_error(writer: &Arc<Mutex<W>>, id: Value, code: i64, message: String) {
        let writer = writer.clone();
        let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
        tokio::spawn(async move {
            if let Err(e) = Self::write_line(&writer, body.to_string().into_bytes()).await {
                tracing::warn!(error = %e, "cannot answer a malformed message");
            }
        });
    }

    /// Reads one line into `self.buf`. `Ok(false)` at end of input;
    /// `Err(n)` when the line was longer than the limit (and was skipped).
    /// Cancel-safe: dropped between two reads, it resumes the same line.
    async fn read_line(&mut self) -> std::io::Result<Result<bool, usize>> {
        if self.delivered {
            self.buf.clear();
            self.skipped = 0;
            self.delivered = false;
        }
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                self.delivered = true;
                return Ok(if self.skipped > 0 {
                    Err(self.skipped)
                } else {
                    Ok(!self.buf.is_empty())
                });
            }
            let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
                Some(i) => (&available[..i], Some(i + 1)),
                None => (available, None),
            };
            if self.skipped > 0 || self.buf.len() + chunk.len() > self.max_line {
                self.skipped += self.buf.len() + chunk.len();
                self.buf.clear();
            } else {
                self.buf.extend_from_slice(chunk);
            }
            let consumed = done.unwrap_or(available.len());
            self.reader.consume(consumed);
            if done.is_some() {
                self.delivered = true;
                return Ok(if self.skipped > 0 {
                    Err(self.skipped)
                } else {
                    Ok(true)
                });
            }
        }
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncBufRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = self.writer.clone();
        async move {
            let line = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            Self::write_line(&writer, line).await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.read_line().await {
                Err(e) => {
                    tracing::warn!(error = %e, "reading stdin failed");
                    self.ended.cancel();
                    return None;
                }
                Ok(Ok(false)) => {
                    self.ended.cancel();
                    return None;
                }
                Ok(Err(size)) => {
                    Self::reply_error(
                        &self.writer,
                        Value::Null,
                        -32600,
                        format!(
                            "message of {size} bytes exceeds the limit of {} bytes (hub.max_message_bytes)",
                            self.max_line
                        ),
                    );
                }
                Ok(Ok(true)) => {
                    let line = trim_cr(&self.buf);
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    let value: Value = match serde_json::from_slice(line) {
                        Ok(v) => v,
                        Err(e) => {
                            Self::reply_error(
                                &self.writer,
                                Value::Null,
                                -32700,
                                format!("parse error: {e}"),
                            );
                            continue;
                        }
                    };
                    let id = value.get("id").cloned();
                    match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(value) {
                        Ok(message) => return Some(message),
                        Err(e) => {
                            // A notification (no id) gets no reply, per JSON-RPC.
                            match id {
                                None => {
                                    tracing::warn!(error = %e, "ignoring a malformed notification")
                                }
                                Some(id) => {
                                    let id = if id.is_string() || id.is_number() {
                                        id
                                    } else {
                                        Value::Null
                                    };
                                    Self::reply_error(
                                        &self.writer,
                                        id,
                                        -32600,
                                        format!("invalid request: {e}"),
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.writer.lock().await.flush().await
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(input: &str, max: usize) -> (Vec<String>, Vec<Value>) {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let (read, write) = tokio::io::split(server);
        let mut t = LineTransport::new(tokio::io::BufReader::new(read), write, max);
        client.write_all(input.as_bytes()).await.unwrap();
        client.shutdown().await.unwrap();
        let mut received = Vec::new();
        while let Some(m) = t.receive().await {
            received.push(serde_json::to_string(&m).unwrap());
        }
        drop(t);
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut client, &mut out)
            .await
            .unwrap();
        let replies = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (received, replies)
    }

    #[tokio::test]
    async fn malformed_lines_get_errors_and_good_lines_pass() {
        let input = concat!(
            "not json\n",
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":42}\n",
            "\n",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r\n",
        );
        let (received, replies) = run(input, 1024).await;
        assert_eq!(received.len(), 1, "{received:?}");
        assert!(received[0].contains("\"ping\""));
        assert_eq!(replies[0]["error"]["code"], -32700);
        assert_eq!(replies[0]["id"], Value::Null);
        assert_eq!(replies[1]["error"]["code"], -32600);
        assert_eq!(replies[1]["id"], 7);
    }

    #[tokio::test]
    async fn oversized_line_is_refused_and_the_next_one_is_read() {
        let big = format!("{{\"x\":\"{}\"}}\n", "a".repeat(5000));
        let input = format!("{big}{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}}\n");
        let (received, replies) = run(&input, 1024).await;
        assert_eq!(received.len(), 1);
        assert_eq!(replies.len(), 1);
        assert!(
            replies[0]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("exceeds the limit")
        );
    }

    /// The SDK's loop drops `receive` whenever another event wins its
    /// select; a line that arrived in pieces must survive that.
    #[tokio::test]
    async fn a_receive_dropped_half_way_loses_nothing() {
        use tokio::io::AsyncWriteExt;
        let (mut client, server) = tokio::io::duplex(1024);
        let mut t = LineTransport::new(tokio::io::BufReader::new(server), tokio::io::sink(), 1024);
        client
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,")
            .await
            .unwrap();
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), t.receive()).await;
        assert!(early.is_err(), "half a line is not a message");
        client
            .write_all(
                b"\"method\":\"ping\"}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n",
            )
            .await
            .unwrap();
        for id in [1, 2] {
            let m = t.receive().await.expect("a message");
            let v = serde_json::to_value(&m).unwrap();
            assert_eq!(v["id"], id, "{v}");
        }
    }

    /// One line of a generated input, and what it must give.
    #[derive(Debug, Clone)]
    enum Item {
        /// A request: handed on as a message.
        Ping(u32),
        /// Not JSON: a parse error.
        Garbage(String),
        /// JSON with an id but not a request: an invalid-request error
        /// naming the id.
        NotRpc(u32),
        /// Over the limit: an invalid-request error.
        Oversized(usize),
        /// Blank: nothing.
        Blank,
    }

    const MAX: usize = 256;

    fn item() -> impl proptest::strategy::Strategy<Value = Item> {
        use proptest::prelude::*;
        prop_oneof![
            4 => any::<u32>().prop_map(Item::Ping),
            2 => "[a-z!@#%&*()<>?;:~][a-z!@#%&*()<>?;:~0-9]{0,40}".prop_map(Item::Garbage),
            2 => any::<u32>().prop_map(Item::NotRpc),
            1 => (MAX + 1..MAX * 8).prop_map(Item::Oversized),
            1 => Just(Item::Blank),
        ]
    }

    fn line(item: &Item) -> String {
        match item {
            Item::Ping(id) => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#),
            Item::Garbage(g) => g.clone(),
            Item::NotRpc(id) => format!(r#"{{"id":{id},"x":1}}"#),
            Item::Oversized(n) => format!(r#"{{"x":"{}"}}"#, "a".repeat(*n)),
            Item::Blank => String::new(),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// Whatever the mix of good and bad lines, line endings and read
        /// sizes: every request is handed on, in order; every bad line gets
        /// exactly its own error; blank lines get nothing; nothing panics
        /// and the input is read to its end.
        #[test]
        fn framing_hands_on_every_request_and_answers_every_bad_line(
            items in proptest::collection::vec(item(), 0..40),
            crlf in proptest::collection::vec(proptest::bool::ANY, 40),
            capacity in 1usize..64,
            final_newline in proptest::bool::ANY,
        ) {
            let mut input = String::new();
            for (i, it) in items.iter().enumerate() {
                input.push_str(&line(it));
                let last = i + 1 == items.len();
                if !last || final_newline {
                    input.push_str(if crlf[i] { "\r\n" } else { "\n" });
                }
            }
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let (received, replies) = rt.block_on(async {
                let (mut client, server) = tokio::io::duplex(1 << 20);
                let (read, write) = tokio::io::split(server);
                let mut t = LineTransport::new(
                    tokio::io::BufReader::with_capacity(capacity, read),
                    write,
                    MAX,
                );
                client.write_all(input.as_bytes()).await.unwrap();
                client.shutdown().await.unwrap();
                let mut received = Vec::new();
                while let Some(m) = t.receive().await {
                    received.push(serde_json::to_value(&m).unwrap()["id"].clone());
                }
                // The error replies are written from tasks of their own.
                tokio::task::yield_now().await;
                for _ in 0..8 {
                    tokio::task::yield_now().await;
                }
                drop(t);
                let mut out = String::new();
                tokio::io::AsyncReadExt::read_to_string(&mut client, &mut out).await.unwrap();
                let replies: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
                (received, replies)
            });
            let pings: Vec<Value> = items
                .iter()
                .filter_map(|it| match it { Item::Ping(id) => Some(json!(id)), _ => None })
                .collect();
            proptest::prop_assert_eq!(received, pings);
            let count = |code: i64| replies.iter().filter(|r| r["error"]["code"] == code).count();
            let garbage = items.iter().filter(|i| matches!(i, Item::Garbage(_))).count();
            let invalid = items.iter().filter(|i| matches!(i, Item::NotRpc(_) | Item::Oversized(_))).count();
            proptest::prop_assert_eq!(count(-32700), garbage);
            proptest::prop_assert_eq!(count(-32600), invalid);
            proptest::prop_assert_eq!(replies.len(), garbage + invalid);
            let mut named: Vec<Value> = replies.iter().filter(|r| r["id"] != Value::Null).map(|r| r["id"].clone()).collect();
            let mut expected: Vec<Value> = items.iter().filter_map(|it| match it { Item::NotRpc(id) => Some(json!(id)), _ => None }).collect();
            named.sort_by_key(|v| v.as_u64());
            expected.sort_by_key(|v| v.as_u64());
            proptest::prop_assert_eq!(named, expected);
        }
    }
}
