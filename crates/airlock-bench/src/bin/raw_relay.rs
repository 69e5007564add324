//! `bench-raw-relay`: the floor of any proxy hop. Starts the upstream and
//! copies bytes both ways with two blocking threads: no parsing, no
//! protocol, no async runtime. What it adds is the cost of one more process
//! and two more pipe crossings per message.

use std::io::{Read, Write};
use std::process::{Command, Stdio};

fn pump(mut from: impl Read, mut to: impl Write) {
    let mut buf = [0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).and_then(|_| to.flush()).is_err() {
                    return;
                }
            }
        }
    }
}

fn main() {
    let upstream = std::env::args()
        .nth(1)
        .expect("usage: bench-raw-relay UPSTREAM");
    let mut child = Command::new(upstream)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the upstream");
    let to_child = child.stdin.take().expect("stdin");
    let from_child = child.stdout.take().expect("stdout");
    let down = std::thread::spawn(move || pump(from_child, std::io::stdout()));
    pump(std::io::stdin(), to_child);
    let _ = child.kill();
    let _ = child.wait();
    let _ = down.join();
}
