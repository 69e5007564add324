//! Scrubbing throughput: a 1 MB result with 100 registered secrets, the
//! Aho-Corasick scrubber against a naive search-and-replace per form.

use std::time::Instant;

use airlock_secrets::Scrubber;
use base64::Engine;

pub struct ScrubReport {
    pub gb_per_s: f64,
    pub naive_gb_per_s: f64,
    pub patterns: usize,
}

pub fn run() -> ScrubReport {
    // Deterministic pseudo-random secrets and text.
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let secrets: Vec<String> = (0..100)
        .map(|_| {
            (0..32)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize] as char)
                .collect()
        })
        .collect();
    let words = [
        "the ",
        "result ",
        "of ",
        "a ",
        "tool ",
        "call ",
        "with ",
        "data, ",
        "{\"k\": 1} ",
    ];
    let mut text = String::with_capacity(1 << 20);
    while text.len() < (1 << 20) {
        text.push_str(words[(next() % words.len() as u64) as usize]);
        if next() % 5000 == 0 {
            text.push_str(&secrets[(next() % 100) as usize]);
        }
    }
    let scrubber = Scrubber::new(&secrets);
    let rounds = 20;
    let t = Instant::now();
    let mut sink = 0usize;
    for _ in 0..rounds {
        sink += scrubber.scrub(&text).len();
    }
    let fast = (text.len() * rounds) as f64 / t.elapsed().as_secs_f64() / 1e9;

    // Naive: one replace per secret per form (raw and the four base64s).
    let engines = [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    let forms: Vec<String> = secrets
        .iter()
        .flat_map(|s| {
            std::iter::once(s.clone()).chain(engines.iter().map(|e| e.encode(s.as_bytes())))
        })
        .collect();
    let t = Instant::now();
    for _ in 0..2 {
        let mut out = text.clone();
        for f in &forms {
            out = out.replace(f.as_str(), "[secret]");
        }
        sink += out.len();
    }
    let naive = (text.len() * 2) as f64 / t.elapsed().as_secs_f64() / 1e9;
    std::hint::black_box(sink);
    ScrubReport {
        gb_per_s: fast,
        naive_gb_per_s: naive,
        patterns: scrubber.pattern_count(),
    }
}
