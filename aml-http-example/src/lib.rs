//! A worked example of a custom adapter on the AML action boundary: host tools as plain
//! HTTP/JSON endpoints, the way webhook-style tool servers expose them.
//!
//! This crate provides:
//!
//! - [`HttpToolServer`] and [`serve`]: `POST /tools/{name}` with the tool's arguments as the
//!   JSON body calls the tool through the host's [`aml_core::ToolGate`]; the answer is a
//!   JSON [`CallReply`] (`aml-http-tool-reply/1`: status, reason, plan, receipt, the
//!   tool's result) with an HTTP status code mapped from the outcome ([`status_code`]).
//!   `GET /tools` lists what the host's policy can allow ([`aml_core::ToolGate::listing`]).
//!   Requests are held to [`ServerLimits`].
//! - [`HttpToolClient`]: the agent's side, on hyper's client.
//!
//! It depends on `aml-core` (features `catalog` and `tokio`) and its HTTP stack (hyper 1, hyper-util,
//! http-body-util) only, and holds no policy: the gate decides, the adapter translates. How
//! to write one of your own, and what it must and must not do, is
//! `docs/CUSTOM_ADAPTER.md`; its code is compiled here as doctests. The crate is not
//! published (`publish = false`).
//!
//! | outcome ([`aml_core::CallOutcome`]) | reply `status` | HTTP |
//! |---|---|---|
//! | `Dispatched` | `dispatched` | 200 |
//! | `Blocked` | `blocked` | 403 policy or approval, 409 grant spent, policy changed or host misconfigured, 400/413/422 arguments |
//! | `Refused` | `refused` | 404 unknown tool, 422 outside the schema or an inexact number, 400 malformed, 405 method, 415 content type, 413 too large, 408 body too slow or deadline passed, 409 reused call id |
//! | `HostError` | `host_error` | 500 |
//! | `Unknown` | `unknown` | 502, or 504 `dispatch_in_progress` when the tool had not returned by the deadline |
//!
//! Every 4xx and the 500 mean the tool was not entered; 502 and 504 mean it was entered and
//! its outcome is unknown: do not retry automatically.
//!
//! ```no_run
//! # async fn run(gate: aml_core::ToolGate) -> std::io::Result<()> {
//! use aml_http_example::{serve, HttpToolServer};
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! serve(listener, HttpToolServer::new(gate), std::future::pending()).await;
//! # Ok(()) }
//! ```
//!
//! Anyone who can reach the port is the agent: they can propose calls, which the host's
//! policy, approval and grants decide. Bind to loopback, or put authentication in front.
#![forbid(unsafe_code)]

mod client;
mod reply;
mod routes;
mod server;

pub use client::{CallAnswer, ClientError, HttpToolClient, SEGMENT};
pub use reply::{status_code, AdapterReason, CallReply, ReplyStatus, DETAIL_LIMIT, REPLY_PROTOCOL};
pub use routes::TOOLS_PATH;
pub use server::{serve, HttpToolServer, ServerLimits, ADAPTER};

/// `docs/CUSTOM_ADAPTER.md`, whose examples compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/CUSTOM_ADAPTER.md")]
struct CustomAdapterGuide;
