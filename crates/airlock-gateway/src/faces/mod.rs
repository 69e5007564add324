//! The two ways a client reaches airlock.

pub mod auth;
pub mod http;
mod lines;
pub mod stdio;
