//! The review against fixture registers and trees, and the project's own
//! register against this tree.

use std::path::Path;

use airlock_register::{Register, review};
use chrono::NaiveDate;

fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("tests")).unwrap();
    std::fs::write(
        dir.path().join("tests/guard.rs"),
        "#[test]\nfn the_guard_holds() {}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("tests/test_it.py"),
        "def test_it_holds():\n    pass\n",
    )
    .unwrap();
    dir
}

fn day(s: &str) -> NaiveDate {
    s.parse().unwrap()
}

const FIXED: &str = r#"
[[finding]]
id = "F-1"
severity = "high"
title = "a hole"
found = "by a hostile upstream"
resolution = "fixed"
test = "tests/guard.rs::the_guard_holds"
files = ["tests/guard.rs"]

[[finding]]
id = "F-2"
severity = "low"
title = "python"
found = "by the SDK"
resolution = "fixed"
test = "tests/test_it.py::test_it_holds"
"#;

const ACCEPTED: &str = r#"
[[finding]]
id = "A-1"
severity = "medium"
title = "a limit"
found = "by measurement"
resolution = "accepted"
owner = "core"
reason = "costs more than it saves"
revisit_by = "2027-03-01"
"#;

#[test]
fn a_register_that_holds_has_no_problems() {
    let dir = tree();
    let register = Register::parse(&format!("{FIXED}{ACCEPTED}")).unwrap();
    assert_eq!(
        review(&register, dir.path(), day("2027-03-01")),
        Vec::<String>::new()
    );
}

#[test]
fn an_acceptance_past_its_date_is_a_problem() {
    let dir = tree();
    let register = Register::parse(ACCEPTED).unwrap();
    let problems = review(&register, dir.path(), day("2027-03-02"));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("A-1") && problems[0].contains("expired"),
        "{problems:?}"
    );
}

#[test]
fn a_test_or_file_that_is_not_there_is_a_problem() {
    let dir = tree();
    for (named, says) in [
        (
            "tests/guard.rs::a_test_nobody_wrote",
            "has no test `a_test_nobody_wrote`",
        ),
        ("tests/gone.rs::the_guard_holds", "tests/gone.rs is missing"),
        ("tests/guard.rs", "not written path::name"),
        // A name that is only the start of another is not that test.
        ("tests/guard.rs::the_guard", "has no test `the_guard`"),
    ] {
        let text = FIXED.replace("tests/guard.rs::the_guard_holds", named);
        let problems = review(
            &Register::parse(&text).unwrap(),
            dir.path(),
            day("2027-01-01"),
        );
        assert!(
            problems.iter().any(|p| p.contains(says)),
            "{named}: {problems:?}"
        );
    }
    let text = FIXED.replace(
        r#"files = ["tests/guard.rs"]"#,
        r#"files = ["src/gone.rs"]"#,
    );
    let problems = review(
        &Register::parse(&text).unwrap(),
        dir.path(),
        day("2027-01-01"),
    );
    assert_eq!(problems, ["F-1: the file src/gone.rs is missing"]);
}

#[test]
fn a_guard_whose_test_or_file_is_gone_is_a_problem() {
    let dir = tree();
    let text = r#"
[[guard]]
name = "held by a test"
kind = "test"
test = "tests/guard.rs::gone"

[[guard]]
name = "held by a type"
kind = "type"
file = "src/gone.rs"

[[guard]]
name = "held by a person"
kind = "manual"
how = "read the diff"
"#;
    let register = Register::parse(text).unwrap();
    let problems = review(&register, dir.path(), day("2027-01-01"));
    assert_eq!(problems.len(), 2, "{problems:?}");
    let shown = airlock_register::render(&register);
    assert!(
        shown.contains("- [ ] held by a person (manual: read the diff)"),
        "{shown}"
    );
    assert!(shown.contains("- [x] held by a test"), "{shown}");
}

#[test]
fn a_finding_without_a_resolution_or_twice_does_not_parse() {
    for (text, says) in [
        (
            "[[finding]]\nid = \"F-1\"\nseverity = \"high\"\ntitle = \"t\"\nfound = \"f\"\n",
            "resolution",
        ),
        (
            "[[finding]]\nid = \"F-1\"\nseverity = \"high\"\ntitle = \"t\"\nfound = \"f\"\nresolution = \"open\"\n",
            "open",
        ),
        (
            "[[finding]]\nid = \"F-1\"\nseverity = \"high\"\ntitle = \"t\"\nfound = \"f\"\nresolution = \"accepted\"\nowner = \"o\"\nreason = \"r\"\n",
            "revisit_by",
        ),
        (&format!("{FIXED}{FIXED}"), "twice"),
        (&FIXED.replace("test = ", "tset = "), "unknown field `tset`"),
    ] {
        let err = format!("{:#}", Register::parse(text).unwrap_err());
        assert!(err.contains(says), "{says}: {err}");
    }
}

/// The project's own register holds against this tree (CI also runs the
/// command).
#[test]
fn the_projects_register_holds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let register = Register::load(&root.join("docs/security/register.toml")).unwrap();
    let today = chrono::Local::now().date_naive();
    assert_eq!(review(&register, &root, today), Vec::<String>::new());
    assert!(
        register.findings.len() >= 20,
        "seeded with the findings so far"
    );
}
