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
    /// One scan of the serialized message: every message's check.
    pub scan_gb_per_s: f64,
    /// Serializing the message and scanning it, as the hub does on arrival.
    pub serialize_scan_gb_per_s: f64,
    /// Taking a message apart string by string (a message that holds one).
    pub scrub_json_gb_per_s: f64,
    pub text_bytes: usize,
    pub text_lines: usize,
    pub text_memmem_gb_per_s: f64,
    pub envelope_gb_per_s: f64,
    /// The envelope over the compact message: a result of few lines.
    pub envelope_compact_gb_per_s: f64,
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

/// Each pass's best of seven runs of `rounds` passes over `bytes` bytes, in
/// GB/s, the passes taking turns so that a slow spell of the machine falls
/// on all of them alike (noise only ever slows a run down).
fn best_gb_per_s<const N: usize>(
    bytes: usize,
    rounds: usize,
    mut passes: [&mut dyn FnMut(); N],
) -> [f64; N] {
    let mut best = [0.0f64; N];
    for _ in 0..7 {
        for (k, pass) in passes.iter_mut().enumerate() {
            let t = Instant::now();
            for _ in 0..rounds {
                pass();
            }
            let rate = (bytes * rounds) as f64 / t.elapsed().as_secs_f64() / 1e9;
            best[k] = best[k].max(rate);
        }
    }
    best
}

pub fn run() -> MessagesReport {
    let msg = message();
    let bytes = serde_json::to_vec(&msg).expect("serializes");
    let needle = memchr::memmem::Finder::new(b"sk_live_9999_not_there");
    let scrubber = Scrubber::new(&secrets());
    let n = bytes.len();

    let [memmem, scan] = best_gb_per_s(
        n,
        400,
        [
            &mut || {
                black_box(needle.find(black_box(&bytes)));
            },
            &mut || {
                black_box(scrubber.finds_in_serialized(black_box(&bytes)));
            },
        ],
    );
    let [serialize_scan] = best_gb_per_s(
        n,
        20,
        [&mut || {
            let out = serde_json::to_vec(black_box(&msg)).expect("serializes");
            black_box(scrubber.finds_in_serialized(&out));
        }],
    );
    // Measured over the serialized size, clone included (the hub scrubs a
    // message it owns; the clone is the bench's, and counted against it).
    let [scrub_json] = best_gb_per_s(
        n,
        4,
        [&mut || {
            let mut m = msg.clone();
            scrubber.scrub_json(&mut m);
            black_box(m);
        }],
    );

    let nonce = airlock_gateway::quote::nonce();
    let compact = std::str::from_utf8(&bytes).expect("utf-8");
    let [envelope_compact] = best_gb_per_s(
        n,
        200,
        [&mut || {
            black_box(airlock_gateway::quote::neutralise(
                black_box(compact),
                &nonce,
            ));
        }],
    );

    // The envelope over a text result with lines: the message printed
    // pretty, as a tool returning JSON would.
    let text = serde_json::to_string_pretty(&msg).expect("serializes");
    let [text_memmem, envelope] = best_gb_per_s(
        text.len(),
        100,
        [
            &mut || {
                black_box(needle.find(black_box(text.as_bytes())));
            },
            &mut || {
                black_box(airlock_gateway::quote::neutralise(black_box(&text), &nonce));
            },
        ],
    );

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
        bytes: n,
        memmem_gb_per_s: memmem,
        scan_gb_per_s: scan,
        serialize_scan_gb_per_s: serialize_scan,
        scrub_json_gb_per_s: scrub_json,
        text_bytes: text.len(),
        text_lines: text.lines().count(),
        text_memmem_gb_per_s: text_memmem,
        envelope_gb_per_s: envelope,
        envelope_compact_gb_per_s: envelope_compact,
        token_check_ns: check_ns,
        header_lookup_ns: lookup_ns,
    }
}

/// The report's section.
pub fn render(r: &MessagesReport) -> String {
    let ratio = |x: f64| x / r.memmem_gb_per_s;
    let target = |x: f64| if x >= 0.5 { "met" } else { "not met" };
    format!(
        "### Every message: scrubbing, the envelope, the token\n\n\
         A {:.1} MiB tools/list-like message (2,000 tools) with 100 registered secrets ({} forms), \
         each pass against one `memchr::memmem` search for a single needle over the same bytes in the same run, \
         the best of seven runs each, taking turns (absolute GB/s moves about 2× between machines of the same kind; \
         the ratio is the number to compare). Target: 0.5 of the memmem scan.\n\n\
         | pass | GB/s | ratio to memmem | target 0.5 |\n| --- | ---: | ---: | --- |\n\
         | memmem, one needle (baseline) | {:.2} | 1.00 | |\n\
         | scrubber: scan of the whole serialized message, every form of every secret | {:.2} | {:.2} | {} |\n\
         | serialize the message, then scan it (what the hub does with each message on arrival) | {:.2} | {:.2} | |\n\
         | take a message apart string by string, keys included (only one that holds a secret; clone counted) | {:.2} | {:.3} | |\n\
         | envelope over the message as one text result (one line) | {:.2} | {:.2} | {} |\n\n\
         The envelope over a {:.1} MiB text result with lines (the message printed pretty):\n\n\
         | pass | GB/s | ratio to memmem | target 0.5 |\n| --- | ---: | ---: | --- |\n\
         | memmem, one needle (baseline) | {:.2} | 1.00 | |\n\
         | envelope over the text, {} lines of {:.0} bytes on average | {:.2} | {:.2} | {} |\n\n\
         | per request | ns |\n| --- | ---: |\n\
         | HTTP face token check (`Authorization: Bearer`, constant time) | {:.0} |\n\
         | a plain `Authorization` header lookup | {:.0} |\n",
        r.bytes as f64 / (1 << 20) as f64,
        Scrubber::new(&secrets()).pattern_count(),
        r.memmem_gb_per_s,
        r.scan_gb_per_s,
        ratio(r.scan_gb_per_s),
        target(ratio(r.scan_gb_per_s)),
        r.serialize_scan_gb_per_s,
        ratio(r.serialize_scan_gb_per_s),
        r.scrub_json_gb_per_s,
        ratio(r.scrub_json_gb_per_s),
        r.envelope_compact_gb_per_s,
        ratio(r.envelope_compact_gb_per_s),
        target(ratio(r.envelope_compact_gb_per_s)),
        r.text_bytes as f64 / (1 << 20) as f64,
        r.text_memmem_gb_per_s,
        r.text_lines,
        r.text_bytes as f64 / r.text_lines as f64,
        r.envelope_gb_per_s,
        r.envelope_gb_per_s / r.text_memmem_gb_per_s,
        target(r.envelope_gb_per_s / r.text_memmem_gb_per_s),
        r.token_check_ns,
        r.header_lookup_ns,
    )
}
