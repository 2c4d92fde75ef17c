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
    /// The JSON text an agent on a wire would send. A non-finite number has no JSON form;
    /// it is written as an overflowing literal (`1e999`), which `JSON.parse` reads as an
    /// infinity — the closest a wire can carry, and refused by the strict parser.
    pub fn agent_json(&self) -> String {
        let mut text = format!(
            "{{\"to\":{},\"body\":{}",
            serde_json::Value::from(self.to.as_str()),
            serde_json::Value::from(self.body.as_str())
        );
        if let Some(p) = self.priority {
            let number = match p {
                p if p.is_finite() => serde_json::Value::from(p).to_string(),
                p if p > 0.0 => "1e999".to_owned(),
                p if p < 0.0 => "-1e999".to_owned(),
                _ => "null".to_owned(),
            };
            text.push_str(&format!(",\"priority\":{number}"));
        }
        text.push('}');
        text
    }

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
