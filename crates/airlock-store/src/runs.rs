//! Code mode's runs and their journals.
//!
//! A run is the model's program, its seed and clock, and a state. Its
//! journal holds one entry per bridge call, written when the call starts
//! and completed when it settles, before the code sees the result; a resumed
//! run replays settled entries and never repeats a started one. A paused run
//! is resumed by exactly one taker: the `paused → running` step is one
//! conditional update.

use serde::{Deserialize, Serialize};

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Running,
    /// Waiting for a person's decision on one of its calls.
    Paused,
    Finished,
    Failed,
    /// A resume took another path than its journal.
    Diverged,
}

impl RunState {
    pub const ALL: [RunState; 5] = [
        RunState::Running,
        RunState::Paused,
        RunState::Finished,
        RunState::Failed,
        RunState::Diverged,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Paused => "paused",
            RunState::Finished => "finished",
            RunState::Failed => "failed",
            RunState::Diverged => "diverged",
        }
    }

    pub fn parse(word: &str) -> Option<RunState> {
        RunState::ALL.into_iter().find(|s| s.as_str() == word)
    }
}

/// A run as it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRun {
    pub id: String,
    pub principal: String,
    /// The program, exactly as the model sent it (refused if it holds a
    /// secret value, so it is never stored with one).
    pub code: String,
    pub seed: u32,
    pub clock_ms: i64,
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRow {
    pub id: String,
    pub principal: String,
    pub code: String,
    pub seed: u32,
    pub clock_ms: i64,
    pub state: RunState,
    /// Why it ended, or what it waits for; scrubbed.
    pub detail: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// How many times it was resumed.
    pub resumes: u32,
}

/// Where one journaled call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryState {
    /// Sent into the pipeline; its end is not known. Never repeated.
    Started,
    /// Settled: `reply` is what the code got.
    Settled,
    /// Waiting for the person's decision on approval `approval`.
    Paused,
}

impl EntryState {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryState::Started => "started",
            EntryState::Settled => "settled",
            EntryState::Paused => "paused",
        }
    }

    pub fn parse(word: &str) -> Option<EntryState> {
        [EntryState::Started, EntryState::Settled, EntryState::Paused]
            .into_iter()
            .find(|s| s.as_str() == word)
    }
}

/// One bridge call in a run's journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    pub run: String,
    pub seq: u32,
    /// The exposed tool name.
    pub tool: String,
    /// `sha256:` of the canonical arguments.
    pub args_digest: String,
    pub state: EntryState,
    /// The reply the code got, as JSON (scrubbed): `{"value": …}` or
    /// `{"error": {"code": …, "message": …}}`; empty until settled.
    pub reply: String,
    /// The approval a paused entry waits for.
    pub approval: String,
    pub at_ms: i64,
}
