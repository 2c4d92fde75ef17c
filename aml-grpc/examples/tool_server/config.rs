//! The example server's configuration file.

use std::path::Path;
use std::time::Duration;

use aml_core::{Policy, ToolCatalog};
use aml_grpc::ServerLimits;
use serde::Deserialize;
use serde_json::{json, Value};

/// `server.json`: the host policy, the tool catalog, the demonstration hooks and limits.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) policy: Policy,
    pub(crate) catalog: ToolCatalog,
    pub(crate) fixture: Fixture,
    pub(crate) limits: ServerLimits,
}

/// Stand-ins for a human approver and a real tool, for demonstrations and tests.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Fixture {
    /// How long the approver takes to answer.
    pub(crate) approval_delay_ms: u64,
    /// Whether it approves (the exact digest it was asked about) or declines.
    pub(crate) approve: bool,
    /// How long the tool runs once entered.
    pub(crate) tool_delay_ms: u64,
    /// When not 0, the tool fails after entry with an error text of this many bytes.
    pub(crate) tool_error_bytes: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    policy: Value,
    tools: Value,
    fixture: Fixture,
    #[serde(default)]
    limits: Option<Limits>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Limits {
    max_request_bytes: usize,
    default_timeout_ms: Option<u64>,
}

/// The configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {detail}")]
    Invalid { path: String, detail: String },
}

impl Config {
    /// Reads and checks `path` (strict JSON: duplicate keys and unknown fields are errors).
    pub(crate) fn load(path: &Path) -> Result<Config, ConfigError> {
        let shown = path.display().to_string();
        let invalid = |detail: String| ConfigError::Invalid {
            path: shown.clone(),
            detail,
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        let value = aml_core::strict::parse_str(&text).map_err(|e| invalid(e.to_string()))?;
        let document: Document = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
        // A malformed policy would deny every call; a demonstration server refuses to start.
        // The document itself, or the path of a policy file (a .cedar file is Cedar).
        let base = path.parent().unwrap_or(Path::new("."));
        let policy = Policy::from_config(&document.policy, base).map_err(invalid)?;
        let catalog = ToolCatalog::from_json(&json!({"tools": document.tools}).to_string())
            .map_err(|e| invalid(e.to_string()))?;
        let limits = match document.limits {
            Some(l) => ServerLimits {
                max_request_bytes: l.max_request_bytes,
                default_timeout: l.default_timeout_ms.map(Duration::from_millis),
            },
            None => ServerLimits::default(),
        };
        Ok(Config {
            policy,
            catalog,
            fixture: document.fixture,
            limits,
        })
    }
}
