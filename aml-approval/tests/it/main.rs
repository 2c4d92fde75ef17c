//! aml-approval's integration tests: one binary, a module per area.

#[cfg(feature = "web")]
mod common;

#[cfg(feature = "web")]
mod api;
#[cfg(feature = "web")]
mod browser;
mod cli;
#[cfg(feature = "web")]
mod events;
#[cfg(feature = "web")]
mod history;
mod hook;
#[cfg(feature = "web")]
mod notify;
mod tty;
#[cfg(feature = "web")]
mod web;
