use std::fmt;
use std::path::{Path, PathBuf};

/// A configuration problem a person can fix: where it is and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// 1-based; 0 when the problem has no position (the file cannot be read).
    pub line: usize,
    pub column: usize,
    /// Dotted key path, e.g. `sources.github.command`.
    pub key: Option<String>,
    pub message: String,
    pub fix: String,
}

impl ConfigError {
    pub(crate) fn io(path: &Path, err: &std::io::Error) -> Self {
        ConfigError {
            file: path.to_path_buf(),
            line: 0,
            column: 0,
            key: None,
            message: format!("cannot read the config file: {err}"),
            fix: "check the path given to --config and that the file is readable".into(),
        }
    }

    pub(crate) fn at(
        path: &Path,
        text: &str,
        offset: Option<usize>,
        key: Option<String>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        let (line, column) = offset.map(|o| line_col(text, o)).unwrap_or((1, 1));
        ConfigError {
            file: path.to_path_buf(),
            line,
            column,
            key,
            message: message.into(),
            fix: fix.into(),
        }
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..floor_char_boundary(text, offset)];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(key) = &self.key {
            write!(f, " (key `{key}`)")?;
        }
        write!(f, "\n  fix: {}", self.fix)
    }
}

impl std::error::Error for ConfigError {}

/// "did you mean" for a misspelt key or name.
pub(crate) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    airlock_common::closest(word, candidates.iter().copied())
        .first()
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_are_one_based() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 6), (2, 1));
        // 'é' is two bytes but one column.
        assert_eq!(line_col(text, 9), (2, 3));
    }

    #[test]
    fn closest_suggests_only_near_words() {
        assert_eq!(closest("comand", &["command", "args"]), Some("command"));
        assert_eq!(closest("zzzzzz", &["command", "args"]), None);
    }
}
