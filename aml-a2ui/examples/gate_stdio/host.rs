//! The host side of `gate_stdio`: `host.json` (policy and catalog), the fixture tool that
//! logs each entry, and the JSON-lines loop. The SDK interop test runs this same loop.

use std::io::{self, BufRead, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use aml_a2ui::{AllowedCallers, FunctionGate, FunctionRegistry, HostCatalog, HostFunction, WireForm};
use aml_core::{
    async_trait, ActionBoundary, Effect, Policy, ReceiptSink, ResourceRule, ToolCall, ToolError,
    ToolExecutor, ToolRegistration,
};
use serde::Deserialize;
use serde_json::{json, Value};

/// `host.json`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HostConfig {
    /// An `aml-action-policy/1` document, or the path of a policy file (`.cedar`: Cedar).
    policy: Value,
    /// The folder of host.json, which a policy file's path is relative to.
    #[serde(skip)]
    base: std::path::PathBuf,
    #[serde(rename = "catalogId")]
    catalog_id: String,
    #[serde(default)]
    title: Option<String>,
    functions: Vec<FunctionConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FunctionConfig {
    name: String,
    description: String,
    allowed_callers: String,
    args_schema: Value,
    #[serde(default)]
    effect: Option<Effect>,
    #[serde(default)]
    purpose: Option<String>,
    #[serde(default)]
    resource: Option<ResourceRule>,
}

/// Where the fixture tool writes its JSON log lines.
pub(crate) type Log = Arc<Mutex<dyn Write + Send>>;

fn log_line(log: &Log, line: &Value) {
    // One write per line, so lines from the receipt writer thread never interleave with it.
    let text = format!("{line}\n");
    let mut out = log.lock().unwrap_or_else(|p| p.into_inner());
    // A log that cannot be written must not stop the gate from answering.
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// The example's tool: logs each entry as one JSON line and returns `{"ok": true}`.
#[derive(Clone)]
struct FixtureTool {
    function: String,
    log: Log,
}

impl core::fmt::Debug for FixtureTool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FixtureTool")
            .field("function", &self.function)
            .finish()
    }
}

#[async_trait]
impl ToolExecutor for FixtureTool {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolError> {
        log_line(
            &self.log,
            &json!({"tool_entry": {
                "function": self.function,
                "proposal_sha256": call.proposal().digest().to_string(),
                "arguments": call.arguments(),
            }}),
        );
        Ok(json!({"ok": true}))
    }
}

impl HostConfig {
    /// Reads and checks `host.json`.
    pub(crate) fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut config: Self =
            serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        config.base = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        Ok(config)
    }

    /// The host: one catalog, each agent-callable function bound to a tool registration
    /// named after the function, run by a fixture tool that logs to `log`.
    pub(crate) fn host(&self, log: &Log) -> Result<Host, String> {
        // The document itself, or the path of a policy file (a .cedar file is Cedar).
        let policy =
            Arc::new(Policy::from_config(&self.policy, &self.base).map_err(|e| format!("policy: {e}"))?);
        let title = self.title.as_deref().unwrap_or("Host functions");
        let mut catalog = HostCatalog::new(self.catalog_id.as_str(), title);
        for f in &self.functions {
            let fail = |what: &str| format!("function {}: {what}", f.name);
            let callers: AllowedCallers = f.allowed_callers.parse().map_err(|e| fail(&format!("{e}")))?;
            let tool_or_schema = match (callers.agent_may_call(), &f.effect, &f.purpose, &f.resource) {
                (true, Some(effect), Some(purpose), Some(resource)) => {
                    let executor = FixtureTool {
                        function: f.name.clone(),
                        log: Arc::clone(log),
                    };
                    let tool = ToolRegistration::new(
                        f.name.as_str(),
                        *effect,
                        purpose.as_str(),
                        resource.clone(),
                        f.args_schema.clone(),
                    )
                    .map_err(|e| fail(&e.to_string()))?
                    .with_description(f.description.as_str())
                    .with_executor(Arc::new(executor));
                    Ok(tool)
                }
                (true, ..) => return Err(fail("agent-callable functions need effect, purpose and resource")),
                (false, None, None, None) => Err(f.args_schema.clone()),
                (false, ..) => {
                    return Err(fail("rendererOnly functions take no effect, purpose or resource"))
                }
            };
            let function = HostFunction::new(f.name.clone(), f.description.clone(), callers, tool_or_schema)
                .map_err(|e| e.to_string())?;
            catalog = catalog.with_function(function);
        }
        Ok(Host {
            registry: Arc::new(FunctionRegistry::new().with_catalog(catalog)),
            policy,
        })
    }
}

/// The host's catalogs and policy.
pub(crate) struct Host {
    pub(crate) registry: Arc<FunctionRegistry>,
    policy: Arc<Policy>,
}

impl Host {
    /// A gate over the catalogs, recording every message in `sink`. There is no approval
    /// channel: rules with `requires_approval` block with `approval_unavailable`.
    pub(crate) fn gate(&self, sink: Arc<dyn ReceiptSink>) -> Result<FunctionGate, String> {
        let boundary = ActionBoundary::builder(Arc::clone(&self.policy))
            .sink_arc(sink)
            .build();
        FunctionGate::new(Arc::clone(&self.registry), boundary).map_err(|e| e.to_string())
    }
}

/// The renderer capabilities a host advertises to agents: every catalog inline, in the
/// current form (`a2ui-core`'s `A2uiRendererCapabilities`).
pub(crate) fn capabilities(registry: &FunctionRegistry) -> Value {
    let ids: Vec<&str> = registry.catalogs().map(HostCatalog::catalog_id).collect();
    let inline: Vec<Value> = registry
        .catalogs()
        .map(|c| c.definition_in(WireForm::Current))
        .collect();
    json!({"v1.0": {"supportedCatalogIds": ids, "inlineCatalogs": inline}})
}

/// Reads one line of at most `max` bytes into `buf` (without the newline); the rest of a
/// longer line is skipped unread, leaving `max + 1` bytes so the gate refuses it. `false`
/// at the end of input.
fn read_line(input: &mut impl BufRead, max: usize, buf: &mut Vec<u8>) -> io::Result<bool> {
    buf.clear();
    let mut seen = false;
    loop {
        let available = input.fill_buf()?;
        if available.is_empty() {
            return Ok(seen);
        }
        seen = true;
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        let room = (max + 1).saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = done.unwrap_or(available.len());
        input.consume(used);
        if done.is_some() {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(true);
        }
    }
}

/// Answers every input line with exactly one output line: the A2UI response, or for a
/// line that names no usable call id, a top-level `error` without one. The gate records
/// each line in its receipt sink.
pub(crate) fn serve(
    gate: &FunctionGate,
    max_line_bytes: usize,
    runtime: &tokio::runtime::Runtime,
    mut input: impl BufRead,
    mut output: impl Write,
) -> io::Result<()> {
    let mut line = Vec::new();
    while read_line(&mut input, max_line_bytes, &mut line)? {
        let response = match runtime.block_on(gate.handle(&line)) {
            Ok(outcome) => outcome.response.to_bytes(),
            Err(e) => e.response().to_bytes(),
        };
        output.write_all(&response)?;
        output.write_all(b"\n")?;
        output.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_to_one_byte_over_the_limit_and_the_rest_is_skipped() {
        let mut input = io::Cursor::new(b"abcdefgh\nxy\r\nlast".to_vec());
        let mut buf = Vec::new();
        let mut lines = Vec::new();
        while read_line(&mut input, 4, &mut buf).unwrap() {
            lines.push(String::from_utf8(buf.clone()).unwrap());
        }
        assert_eq!(lines, ["abcde", "xy", "last"]);
    }
}
