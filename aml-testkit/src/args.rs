//! The caller's arguments: shared and mutable by the caller while a call is pending.

use std::sync::{Arc, Mutex};

use serde::Serialize;

/// Arguments of the documented `send_message` tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessageArgs {
    /// Recipient; the host maps it to the policy resource.
    pub to: String,
    /// Message body.
    pub body: String,
    /// An optional numeric field, used to pass a non-finite number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<f64>,
}

impl MessageArgs {
    /// `{to, body}`.
    pub fn new(to: &str, body: &str) -> Self {
        MessageArgs {
            to: to.to_owned(),
            body: body.to_owned(),
            priority: None,
        }
    }
}

/// The caller's own copy of its arguments, which the caller (or a fixture acting for it)
/// may change while a call is pending. Adapters read it once, when the call starts.
#[derive(Debug, Clone)]
pub struct CallerArguments(Arc<Mutex<MessageArgs>>);

impl CallerArguments {
    /// Wraps the arguments.
    pub fn new(args: MessageArgs) -> Self {
        CallerArguments(Arc::new(Mutex::new(args)))
    }

    /// Runs `f` with the arguments as they are now.
    pub fn with<R>(&self, f: impl FnOnce(&MessageArgs) -> R) -> R {
        f(&self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Changes the arguments, as a caller might while the call waits for approval.
    pub fn update(&self, f: impl FnOnce(&mut MessageArgs)) {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()));
    }
}
