//! What airlock does to every message, measured against the cheapest scan
//! of the same bytes (one `memchr::memmem` search for a single needle), in
//! the same run: scrubbing a whole JSON message (every string, keys
//! included), the untrusted-content envelope over a text result, and the
//! HTTP face's token check against a plain header lookup.

use std::hint::black_box;
use std::time::Instant;

use airlock_secrets::Scrubber;

pub struct MessagesReport {
    pub bytes: usize,
    pub memmem_gb_per_s: f64,
    pub scrub_json_gb_per_s: f64,
    pub text_gb_per_s: f64,
    pub envelope_gb_per_s: f64,
    pub token_check_ns: f64,
    pub header_lookup_ns: f64,
}

/// A deterministic tools/list-like message of about 1 MiB: 2,000 tools with
/// titles, descriptions, schemas and `_meta`.
fn message() -> serde_json::Value {
    let tools: Vec<serde_json::Value> = (0..2000)
        .map(|i| {
            serde_json::json!({
                "name": format!("tool_{i}"),
                "title": format!("Tool number {i}"),
                "description": format!("Reads the records of table {i} and returns them as rows; pagination by cursor, at most 100 rows per page."),
                "inputSchema": {"type": "object", "properties": {
                    "table": {"type": "string", "description": "which table"},
                    "cursor": {"type": "string", "description": "where to continue"},
                    format!("filter_{i}"): {"type": "string"}
                }},
                "_meta": {"owner": format!("team-{}", i % 7)}
            })
        })
        .collect();
    serde_json::json!({"tools": tools})
}

fn secrets() -> Vec<String> {
    (0..100)
        .map(|i| format!("sk_live_{i:04}_Zq81xWv0mN3bK7cR5tY2uH9e"))
        .collect()
}

fn gb_per_s(bytes: usize, rounds: usize, t: Instant) -> f64 {
    (bytes * rounds) as f64 / t.elapsed().as_secs_f64() / 1e9
}

pub fn run() -> MessagesReport {
    let msg = message();
    let bytes = serde_json::to_vec(&msg).expect("serializes");
    let text = String::from_utf8(bytes.clone()).expect("utf-8");
    let needle = memchr::memmem::Finder::new(b"sk_live_9999_not_there");
    let scrubber = Scrubber::new(&secrets());
    let rounds = 20;

    let t = Instant::now();
    for _ in 0..rounds {
        black_box(needle.find(black_box(&bytes)));
    }
    let memmem = gb_per_s(bytes.len(), rounds, t);

    let t = Instant::now();
    for _ in 0..rounds {
        let mut m = msg.clone();
        scrubber.scrub_json(&mut m);
        black_box(m);
    }
    // Measured over the serialized size, clone included (the hub scrubs a
    // message it owns; the clone is the bench's, and counted against it).
    let scrub_json = gb_per_s(bytes.len(), rounds, t);

    let t = Instant::now();
    for _ in 0..rounds {
        black_box(scrubber.scrub(black_box(&text)));
    }
    let scrub_text = gb_per_s(bytes.len(), rounds, t);

    let t = Instant::now();
    for _ in 0..rounds {
        black_box(airlock_gateway::quote::neutralise(
            black_box(&text),
            "0123456789abcdef0123456789abcdef",
        ));
    }
    let envelope = gb_per_s(bytes.len(), rounds, t);

    let token = "airlock_".to_string() + &"ab".repeat(32);
    let mut headers = axum::http::HeaderMap::new();
    headers.insert(
        axum::http::header::AUTHORIZATION,
        format!("Bearer {token}").parse().expect("header"),
    );
    let n = 1_000_000;
    let t = Instant::now();
    for _ in 0..n {
        black_box(airlock_gateway::faces::auth::check(black_box(&headers), Some(&token)).is_ok());
    }
    let check_ns = t.elapsed().as_nanos() as f64 / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        black_box(
            black_box(&headers)
                .get(axum::http::header::AUTHORIZATION)
                .is_some(),
        );
    }
    let lookup_ns = t.elapsed().as_nanos() as f64 / n as f64;

    MessagesReport {
        bytes: bytes.len(),
        memmem_gb_per_s: memmem,
        scrub_json_gb_per_s: scrub_json,
        text_gb_per_s: scrub_text,
        envelope_gb_per_s: envelope,
        token_check_ns: check_ns,
        header_lookup_ns: lookup_ns,
    }
}

/// The report's section.
pub fn render(r: &MessagesReport) -> String {
    let ratio = |x: f64| x / r.memmem_gb_per_s;
    format!(
        "### Every message: scrubbing, the envelope, the token\n\n\
         A {:.1} MiB tools/list-like message (2,000 tools) with 100 registered secrets (600 forms), \
         each pass against one `memchr::memmem` search for a single needle over the same bytes in the same run \
         (absolute GB/s moves about 2× between machines of the same kind; the ratio is the number to compare).\n\n\
         | pass | GB/s | ratio to memmem |\n| --- | ---: | ---: |\n\
         | memmem, one needle (baseline) | {:.2} | 1.00 |\n\
         | scrub the serialized text (results) | {:.2} | {:.2} |\n\
         | scrub every string of the JSON value, keys included (clone counted) | {:.2} | {:.2} |\n\
         | envelope: neutralise the text | {:.2} | {:.2} |\n\n\
         | per request | ns |\n| --- | ---: |\n\
         | HTTP face token check (`Authorization: Bearer`, constant time) | {:.0} |\n\
         | a plain `Authorization` header lookup | {:.0} |\n",
        r.bytes as f64 / (1 << 20) as f64,
        r.memmem_gb_per_s,
        r.text_gb_per_s,
        ratio(r.text_gb_per_s),
        r.scrub_json_gb_per_s,
        ratio(r.scrub_json_gb_per_s),
        r.envelope_gb_per_s,
        ratio(r.envelope_gb_per_s),
        r.token_check_ns,
        r.header_lookup_ns,
    )
}
