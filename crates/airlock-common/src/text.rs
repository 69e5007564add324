//! Text cut to a size without splitting a character.

/// The longest prefix of `text` at most `max` bytes long that ends at a
/// character boundary.
pub fn prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` cut to at most `max` bytes; when cut, `…` and what `more` says
/// about the whole (given its length in bytes) follow.
pub fn shorten(text: &str, max: usize, more: impl FnOnce(usize) -> String) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    format!("{}…{}", prefix(text, max), more(text.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_at_a_character_boundary() {
        assert_eq!(prefix("héllo", 2), "h");
        assert_eq!(prefix("héllo", 3), "hé");
        assert_eq!(prefix("hi", 10), "hi");
        assert_eq!(shorten("hi", 10, |_| unreachable!()), "hi");
        assert_eq!(
            shorten("ééé", 3, |n| format!(" ({n} bytes)")),
            "é… (6 bytes)"
        );
    }
}
