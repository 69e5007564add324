//! How the CLI writes what people read: times in the local zone, columns
//! that stay aligned whatever the names, text with its control characters
//! made visible.

use chrono::{Local, TimeZone, Utc};

/// `ms` since the epoch as local time, to the second: `2026-12-02 14:05:09`.
pub fn local_time(ms: i64) -> String {
    match Local.timestamp_millis_opt(ms).single() {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S").to_string(),
        None => format!("(time {ms} ms)"),
    }
}

/// `ms` since the epoch as an RFC 3339 UTC time, for machine output.
pub fn iso_time(ms: i64) -> String {
    match Utc.timestamp_millis_opt(ms).single() {
        Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        None => String::new(),
    }
}

/// Text on one line, as typed: control characters (line breaks, tabs,
/// escapes) written as `\n`, `\t`, `\u{1b}`; everything else unchanged.
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Rows printed in columns as wide as their widest cell; the last column
/// is not padded, so a long value there never pushes the others.
#[derive(Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn row(&mut self, cells: impl IntoIterator<Item = String>) {
        self.rows
            .push(cells.into_iter().map(|c| one_line(&c)).collect());
    }

    pub fn render(&self, indent: &str) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|i| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|c| c.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::from(indent);
            for (i, cell) in row.iter().enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    let pad = widths[i] - cell.chars().count() + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    pub fn print(&self, indent: &str) {
        print!("{}", self.render(indent));
    }
}

/// Waits, up to `limit`, for every source of a one-shot command's hub to
/// start or fail, saying on stderr what it waits for: at once, then every
/// five seconds the sources still starting (stdout stays the report).
pub async fn sources_settled(hub: &airlock_gateway::Hub, limit: std::time::Duration) {
    let count = hub.sources().len();
    if count == 0 {
        return;
    }
    eprintln!(
        "starting {count} source(s), waiting up to {}s for each…",
        limit.as_secs()
    );
    let began = std::time::Instant::now();
    // A little past the limit, so that a source's own handshake timeout
    // (the same limit, counted from its start) has fired and says why.
    let settled = hub.settled(limit + std::time::Duration::from_secs(1));
    tokio::pin!(settled);
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
    tick.tick().await;
    loop {
        tokio::select! {
            _ = &mut settled => break,
            _ = tick.tick() => {
                let waiting: Vec<String> = hub
                    .sources()
                    .iter()
                    .filter(|s| s.state().label() == "starting")
                    .map(|s| s.name().to_string())
                    .collect();
                if !waiting.is_empty() {
                    eprintln!(
                        "  still starting after {}s: {}",
                        began.elapsed().as_secs(),
                        waiting.join(", ")
                    );
                }
            }
        }
    }
    second_attempts(hub, began + limit).await;
}

/// A source whose first attempt failed gets its second (the source retries
/// after half a second) if that can end before `until`: a failure of the
/// moment, such as a handshake that lost a race on a loaded machine, is
/// not reported as the source's state.
async fn second_attempts(hub: &airlock_gateway::Hub, until: std::time::Instant) {
    let retries: Vec<_> = hub
        .sources()
        .iter()
        .filter_map(|s| s.after_failure())
        .collect();
    let left = until.saturating_duration_since(std::time::Instant::now());
    // The sources retry on their own, all at once; this waits for each.
    let retried = async {
        for retry in retries {
            retry.await;
        }
    };
    let _ = tokio::time::timeout(left, retried).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_stay_aligned_with_long_and_wide_names() {
        let mut t = Table::default();
        t.row(["#1".into(), "short".into(), "allow".into()]);
        t.row([
            "#22".into(),
            "a_very_long_source__with_a_long_tool_name".into(),
            "ask".into(),
        ]);
        t.row(["#3".into(), "naïve".into(), "deny\nnext".into()]);
        let out = t.render("");
        let lines: Vec<&str> = out.lines().collect();
        // Where `w` starts on the line, in characters.
        let at = |l: &str, w: &str| l[..l.rfind(w).unwrap()].chars().count();
        assert_eq!(at(lines[0], "allow"), at(lines[1], "ask"), "{out}");
        assert_eq!(at(lines[1], "ask"), at(lines[2], "deny"), "{out}");
        assert!(lines[2].ends_with("deny\\nnext"), "{out}");
    }

    #[test]
    fn times_read_as_dates() {
        let t = local_time(1_764_633_600_000);
        assert_eq!(t.len(), 19, "{t}");
        assert!(t.starts_with("2025-12-0"), "{t}");
        assert_eq!(iso_time(1_764_633_600_123), "2025-12-02T00:00:00.123Z");
    }

    #[test]
    fn control_characters_are_visible_and_the_rest_is_untouched() {
        assert_eq!(
            one_line("a\n\"b\"\té\u{1b}[31m"),
            "a\\n\"b\"\\té\\u{1b}[31m"
        );
    }
}
