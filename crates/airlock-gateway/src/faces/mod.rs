//! The two ways a client reaches airlock.

pub mod auth;
mod conn;
pub mod http;
mod lines;
pub mod stdio;
