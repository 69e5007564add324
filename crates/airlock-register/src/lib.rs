//! The security findings register (`docs/security/register.toml`) and its
//! review.
//!
//! Every finding has a resolution, and there is no third kind: *fixed*,
//! naming the test that holds it, or *accepted*, with an owner, a reason
//! and a date by which it is looked at again. Beside the findings stands
//! the checklist of guards, each held by a type, a test, a build gate or a
//! person (manual). [`review`] reads the register against the tree it
//! describes and says what no longer holds: an acceptance past its date, a
//! test or file it names that is not there.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use chrono::NaiveDate;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Register {
    #[serde(default, rename = "finding")]
    pub findings: Vec<Finding>,
    #[serde(default, rename = "guard")]
    pub guards: Vec<Guard>,
}

/// Its fields and its resolution's, and no others: a misspelt key is an
/// error (the resolution checks them, the struct passes them on).
#[derive(Debug, Deserialize)]
pub struct Finding {
    pub id: String,
    pub severity: Severity,
    pub title: String,
    /// What was found, and how.
    pub found: String,
    #[serde(flatten)]
    pub resolution: Resolution,
    /// Files the finding is about; each must exist.
    #[serde(default)]
    pub files: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    High,
    Medium,
    Low,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::High => "high",
            Severity::Medium => "medium",
            Severity::Low => "low",
        }
    }
}

/// How a finding was resolved; a finding without one does not parse.
#[derive(Debug, Deserialize)]
#[serde(tag = "resolution", rename_all = "lowercase", deny_unknown_fields)]
pub enum Resolution {
    /// Held by a test: `path/to/file.rs::test_name` (or a `.py` file's
    /// `def test_name`).
    Fixed { test: String },
    /// Known and accepted for now.
    Accepted {
        owner: String,
        reason: String,
        revisit_by: NaiveDate,
    },
}

#[derive(Debug, Deserialize)]
pub struct Guard {
    pub name: String,
    #[serde(flatten)]
    pub held_by: HeldBy,
}

/// What keeps a guard in place.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum HeldBy {
    /// The compiler: the file whose types make the wrong thing unwritable.
    Type { file: String },
    /// A test, named as a fixed finding names one.
    Test { test: String },
    /// A gate the build runs (lint, structure check): the file that sets it.
    Build { file: String },
    /// A person, each review.
    Manual { how: String },
}

impl Register {
    pub fn parse(text: &str) -> anyhow::Result<Register> {
        let register: Register = toml::from_str(text)?;
        let mut ids: Vec<&str> = register.findings.iter().map(|f| f.id.as_str()).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            bail!("finding {} is in the register twice", w[0]);
        }
        Ok(register)
    }

    pub fn load(path: &Path) -> anyhow::Result<Register> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Register::parse(&text).with_context(|| format!("in {}", path.display()))
    }
}

/// What the review found no longer holding, one line each.
pub fn review(register: &Register, root: &Path, today: NaiveDate) -> Vec<String> {
    let mut problems = Vec::new();
    for f in &register.findings {
        match &f.resolution {
            Resolution::Fixed { test } => {
                if let Err(why) = test_exists(root, test) {
                    problems.push(format!("{}: its test {test}: {why}", f.id));
                }
            }
            Resolution::Accepted { revisit_by, .. } if *revisit_by < today => {
                problems.push(format!(
                    "{}: its acceptance expired on {revisit_by}; look at it again",
                    f.id
                ))
            }
            Resolution::Accepted { .. } => {}
        }
        for file in &f.files {
            if !root.join(file).exists() {
                problems.push(format!("{}: the file {file} is missing", f.id));
            }
        }
    }
    for g in &register.guards {
        let missing = match &g.held_by {
            HeldBy::Test { test } => test_exists(root, test)
                .err()
                .map(|w| format!("its test {test}: {w}")),
            HeldBy::Type { file } | HeldBy::Build { file } => {
                (!root.join(file).exists()).then(|| format!("the file {file} is missing"))
            }
            HeldBy::Manual { .. } => None,
        };
        if let Some(why) = missing {
            problems.push(format!("guard `{}`: {why}", g.name));
        }
    }
    problems
}

/// Whether `path::name` names a test that is there: the file exists and
/// defines a function of that name (`fn name(` in Rust, `def name(` in
/// Python).
fn test_exists(root: &Path, test: &str) -> Result<(), String> {
    let Some((file, name)) = test.rsplit_once("::") else {
        return Err("it is not written path::name".into());
    };
    let path: PathBuf = root.join(file);
    let text = std::fs::read_to_string(&path).map_err(|_| format!("{file} is missing"))?;
    let defined = [format!("fn {name}("), format!("def {name}(")]
        .iter()
        .any(|needle| text.contains(needle.as_str()));
    match defined {
        true => Ok(()),
        false => Err(format!("{file} has no test `{name}`")),
    }
}

/// The register as a person reads it: the findings, then the checklist
/// (manual guards as boxes to tick).
pub fn render(register: &Register) -> String {
    let mut out = String::from("# Security register\n\n## Findings\n\n");
    for f in &register.findings {
        let _ = writeln!(out, "- **{}** ({}) {}", f.id, f.severity.as_str(), f.title);
        let _ = writeln!(out, "  - found: {}", f.found);
        match &f.resolution {
            Resolution::Fixed { test } => {
                let _ = writeln!(out, "  - fixed, held by `{test}`");
            }
            Resolution::Accepted {
                owner,
                reason,
                revisit_by,
            } => {
                let _ = writeln!(out, "  - accepted by {owner} until {revisit_by}: {reason}");
            }
        }
    }
    out.push_str("\n## Guards\n\n");
    for g in &register.guards {
        let line = match &g.held_by {
            HeldBy::Type { file } => format!("- [x] {} (type: `{file}`)", g.name),
            HeldBy::Test { test } => format!("- [x] {} (test: `{test}`)", g.name),
            HeldBy::Build { file } => format!("- [x] {} (build gate: `{file}`)", g.name),
            HeldBy::Manual { how } => format!("- [ ] {} (manual: {how})", g.name),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}
