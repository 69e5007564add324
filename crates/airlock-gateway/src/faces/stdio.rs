//! One client on stdin/stdout: what desktop clients launch.

use std::sync::Arc;

use rmcp::ServiceExt;
use tokio::io::{AsyncRead, AsyncWrite};

use super::lines::LineTransport;
use crate::{Hub, Session};

/// Serves one client on this process's stdio until it disconnects or the
/// hub shuts down.
pub async fn serve(hub: Arc<Hub>) -> anyhow::Result<()> {
    let (input, output) = stdio();
    let session = Session::new(hub.clone());
    // At EOF the client is gone: its calls stop at once.
    let transport = LineTransport::new(
        tokio::io::BufReader::new(input),
        output,
        hub.settings().max_message_bytes,
    )
    .ending(session.gone());
    let running = session
        .serve_with_ct(transport, hub.shutdown().child_token())
        .await?;
    running.waiting().await?;
    Ok(())
}

type Input = Box<dyn AsyncRead + Send + Unpin>;
type Output = Box<dyn AsyncWrite + Send + Unpin>;

/// stdin and stdout. When they are pipes (as when a client launches
/// airlock), they are driven by the event loop directly; tokio's own
/// stdin/stdout hand every read and write to a blocking thread, which costs
/// a thread wake-up per message.
fn stdio() -> (Input, Output) {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        use std::os::unix::fs::FileTypeExt;
        use tokio::net::unix::pipe;
        // Both or neither: making a pipe end a tokio one sets O_NONBLOCK on
        // the open file, so stdin taken over alone, with stdout not a pipe,
        // would leave tokio's blocking stdin reading EAGAIN.
        let fifo = |fd: std::os::fd::BorrowedFd<'_>| {
            fd.try_clone_to_owned()
                .ok()
                .map(std::fs::File::from)
                .and_then(|f| f.metadata().ok())
                .is_some_and(|m| m.file_type().is_fifo())
        };
        if !fifo(std::io::stdin().as_fd()) || !fifo(std::io::stdout().as_fd()) {
            return (Box::new(tokio::io::stdin()), Box::new(tokio::io::stdout()));
        }
        let input = std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .ok()
            .and_then(|fd| pipe::Receiver::from_file(std::fs::File::from(fd)).ok());
        let output = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .ok()
            .and_then(|fd| pipe::Sender::from_file(std::fs::File::from(fd)).ok());
        if let (Some(i), Some(o)) = (input, output) {
            return (Box::new(i), Box::new(o));
        }
    }
    (Box::new(tokio::io::stdin()), Box::new(tokio::io::stdout()))
}
