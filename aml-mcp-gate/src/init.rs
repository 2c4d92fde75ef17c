//! `aml-mcp-gate init -- SERVER…` (or `init --config gate.toml`, for the servers the file
//! names): starts each server, reads its tools, and writes a `tools.json` with every tool
//! pinned to the definition it advertises and an empty `policy.json`. Nothing is allowed
//! until the host chooses each tool's effect and writes rules: the effect is a placeholder
//! the catalog refuses to load. With several servers (`[[servers]]`, ADR 033) each tool
//! names its `"server"`, and the policy examples use the names the client will see.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use aml_core::catalog::{definition_digest, pin_text};
use aml_mcp::relay::{Connection, Inbound};
use bytes::Bytes;
use clap::Args;
use serde_json::{json, Value};

use crate::child::ServerCommand;
use crate::config::InitServer;
use crate::upstream::Server;

/// What `init` writes for each tool's effect: not an effect, so the gate refuses to start
/// until the host replaces it with one.
pub(crate) const EFFECT_PLACEHOLDER: &str = "CHOOSE ONE: read | write | send | pay | delete";

/// Options of `init`.
#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// Where to write tools.json and policy.json (created if needed)
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub(crate) out: PathBuf,
    /// Overwrite tools.json and policy.json if they exist
    #[arg(long)]
    pub(crate) force: bool,
    /// How long the server may take to start and list its tools
    #[arg(long, value_name = "SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) timeout: u64,
    /// The client capabilities init declares to the server, as a JSON object: a server may
    /// list some tools only to clients that declare what those tools need (sampling,
    /// elicitation, roots). Declare what your MCP client declares [default: roots, sampling
    /// and elicitation in form and URL mode]
    #[arg(long, value_name = "JSON", value_parser = parse_capabilities)]
    pub(crate) client_capabilities: Option<Value>,
    /// Read the servers a gate's config file names (its `server`, or its `[[servers]]`
    /// list) instead of a command after `--`
    #[arg(long, value_name = "FILE", conflicts_with = "command")]
    pub(crate) config: Option<PathBuf>,
    /// The MCP server to start and its arguments
    #[arg(
        last = true,
        required_unless_present = "config",
        value_name = "SERVER_COMMAND"
    )]
    pub(crate) command: Vec<OsString>,
}

/// The capabilities `init` declares unless told otherwise: what an MCP client in front of
/// the gate commonly declares, and the gate can pass on (`--sampling relay`,
/// `--elicitation relay`; roots are always relayed).
fn default_capabilities() -> Value {
    json!({"roots": {"listChanged": true}, "sampling": {}, "elicitation": {"form": {}, "url": {}}})
}

fn parse_capabilities(text: &str) -> Result<Value, String> {
    match aml_core::strict::parse_str(text) {
        Ok(object @ Value::Object(_)) => Ok(object),
        Ok(_) => Err("the client capabilities must be a JSON object".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

/// Runs `init`: 0 when both files are written, 1 when the server cannot be read, 2 for
/// files that exist (without `--force`) or cannot be written.
pub(crate) fn main(args: InitArgs) -> ExitCode {
    let servers = match &args.config {
        Some(path) => match crate::config::servers_for_init(path) {
            Ok(servers) => servers,
            Err(e) => {
                eprintln!("aml-mcp-gate init: {e}");
                return ExitCode::from(2);
            }
        },
        None => vec![InitServer {
            named: None,
            server: Server::Child(ServerCommand::new(args.command.clone(), None)),
        }],
    };
    let tools_path = args.out.join("tools.json");
    let policy_path = args.out.join("policy.json");
    let cedar_path = args.out.join("policy.cedar");
    if !args.force {
        for path in [&tools_path, &policy_path, &cedar_path] {
            if path.exists() {
                eprintln!(
                    "aml-mcp-gate init: {} exists; pass --force to overwrite it",
                    path.display()
                );
                return ExitCode::from(2);
            }
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("aml-mcp-gate init: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let limit = Duration::from_secs(args.timeout);
    let capabilities = args
        .client_capabilities
        .clone()
        .unwrap_or_else(default_capabilities);
    let mut listed = Vec::with_capacity(servers.len());
    for server in &servers {
        match runtime.block_on(list_server_tools(&server.server, &capabilities, limit)) {
            Ok(tools) => listed.push(tools),
            Err(e) => {
                eprintln!("aml-mcp-gate init: {}{e}", whose(server));
                return ExitCode::from(1);
            }
        }
    }
    runtime.shutdown_timeout(Duration::from_millis(100));
    let (document, tools) = match catalog(&servers, &listed) {
        Ok(written) => written,
        Err(e) => {
            eprintln!("aml-mcp-gate init: {e}");
            return ExitCode::from(1);
        }
    };
    let policy = json!({"protocol": "aml-action-policy/1", "rules": []});
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!("aml-mcp-gate init: cannot create {}: {e}", args.out.display());
        return ExitCode::from(2);
    }
    for (path, value) in [(&tools_path, &document), (&policy_path, &policy)] {
        if let Err(e) = write_json(path, value) {
            eprintln!("aml-mcp-gate init: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if let Err(e) = std::fs::write(&cedar_path, starter_cedar(&tools)) {
        eprintln!("aml-mcp-gate init: cannot write {}: {e}", cedar_path.display());
        return ExitCode::from(2);
    }
    let run = match &args.config {
        Some(config) => format!(
            "aml-mcp-gate --config {} --policy {} --tools {}",
            config.display(),
            policy_path.display(),
            tools_path.display()
        ),
        None => {
            let server: Vec<String> = args
                .command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            format!(
                "aml-mcp-gate --policy {} --tools {} -- {}",
                policy_path.display(),
                tools_path.display(),
                server.join(" ")
            )
        }
    };
    print!("{}", next_steps(&tools, &tools_path, &policy_path, &run));
    ExitCode::SUCCESS
}

/// `server "NAME": ` for a listed server, nothing for the one server.
fn whose(server: &InitServer) -> String {
    match &server.named {
        Some((name, _)) => format!("server {name:?}: "),
        None => String::new(),
    }
}

/// The tools file for what each server listed (each tool naming its `"server"` when the
/// servers are a list), and each tool's definition as the client will see it: its name
/// exposed per its server's naming (ADR 033). A name two servers would show alike is an
/// error that says how to resolve it.
pub(crate) fn catalog(servers: &[InitServer], listed: &[Vec<Value>]) -> Result<(Value, Vec<Value>), String> {
    let mut entries = Vec::new();
    let mut shown = Vec::new();
    let mut own: Vec<(usize, String)> = Vec::new();
    for (index, (server, tools)) in servers.iter().zip(listed).enumerate() {
        let document = skeleton(tools).map_err(|e| format!("{}{e}", whose(server)))?;
        for mut entry in document["tools"].as_array().cloned().unwrap_or_default() {
            if let Some((name, _)) = &server.named {
                entry["server"] = Value::from(name.as_str());
            }
            own.push((index, entry["name"].as_str().unwrap_or_default().to_owned()));
            entries.push(entry);
        }
        shown.extend(tools.iter().cloned());
    }
    let named: Vec<(&str, aml_mcp::relay::names::Naming)> = servers
        .iter()
        .filter_map(|s| s.named.as_ref().map(|(name, naming)| (name.as_str(), *naming)))
        .collect();
    if !named.is_empty() {
        let exposed = aml_mcp::relay::names::expose(&named, own.iter().map(|(i, n)| (*i, n.as_str())))
            .map_err(|e| e.to_string())?;
        // The resource is fixed to the name the policy will use, as for one server.
        for (i, (tool, entry)) in shown.iter_mut().zip(&mut entries).enumerate() {
            tool["name"] = Value::from(exposed.name(i));
            entry["resource"] = json!({"fixed": exposed.name(i)});
        }
    }
    Ok((json!({"tools": entries}), shown))
}

/// A starter Cedar policy (docs/POLICY.md): every example commented out, so nothing is
/// allowed until the host writes a permit. Tool names are written as Cedar string literals
/// (escaped), so a server's name cannot end a comment line and add a policy of its own.
pub(crate) fn starter_cedar(tools: &[Value]) -> String {
    let mut text = String::from(
        "// A starter Cedar policy for aml-mcp-gate (docs/POLICY.md): nothing is allowed until a\n\
         // permit says so. Use it in place of policy.json: --policy policy.cedar.\n\
         // Resources are the tools file's (a path under its \"root\" is relative to it); a permit\n\
         // annotated @approval(\"required\") asks a person first; a forbid always wins.\n",
    );
    for tool in tools.iter().filter_map(|t| t["name"].as_str()) {
        // Rust's escaping of a string is a valid Cedar string literal with no raw newline.
        let literal = format!("{tool:?}");
        text.push_str(&format!(
            "\n// @id({literal})\n// permit(principal, action == Action::{literal}, resource)\n// when {{ context.resource like \"docs/*\" }};\n"
        ));
    }
    text
}

/// The `tools.json` document for the server's tools: each pinned, its input schema copied,
/// its effect a placeholder, its resource fixed to the tool's name.
pub(crate) fn skeleton(tools: &[Value]) -> Result<Value, String> {
    let mut entries = Vec::with_capacity(tools.len());
    for tool in tools {
        let name = tool["name"]
            .as_str()
            .ok_or("the server listed a tool without a string name")?;
        let digest = definition_digest(tool)
            .map_err(|e| format!("tool {name:?}: its definition cannot be hashed: {e}"))?;
        let schema = match tool.get("inputSchema") {
            Some(schema @ Value::Object(_)) => schema.clone(),
            _ => return Err(format!("tool {name:?}: the server gave no inputSchema object")),
        };
        let mut entry = json!({
            "name": name,
            "effect": EFFECT_PLACEHOLDER,
            "purpose": format!("Use {name} for the user"),
            "resource": {"fixed": name},
            "input_schema": schema,
            "pin": pin_text(&digest),
        });
        if let Some(description) = tool["description"].as_str() {
            entry["description"] = Value::from(description);
        }
        entries.push(entry);
    }
    Ok(json!({"tools": entries}))
}

/// Why a tools file cannot load, when the reason is an effect `init` left as its placeholder:
/// naming the tools that still have it. `None` when none has.
pub(crate) fn placeholder_error(path: &Path, text: &str) -> Option<String> {
    let document: Value = serde_json::from_str(text).ok()?;
    let left: Vec<&str> = document["tools"]
        .as_array()?
        .iter()
        .filter(|t| t["effect"] == EFFECT_PLACEHOLDER)
        .map(|t| t["name"].as_str().unwrap_or("(a tool without a name)"))
        .collect();
    let (first, rest) = left.split_first()?;
    let more = match rest {
        [] => String::new(),
        rest => format!(" (and {} more: {})", rest.len(), rest.join(", ")),
    };
    Some(format!(
        "{}: tool {first:?}{more} still has the effect placeholder init wrote ({EFFECT_PLACEHOLDER:?}): replace it with read, write, send, pay or delete, or remove the tool",
        path.display()
    ))
}

fn write_json(path: &Path, value: &Value) -> std::io::Result<()> {
    let mut text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    text.push('\n');
    std::fs::write(path, text)
}

/// Whether the server says, in the tool's description, that it is deprecated (MCP has no
/// field for it; servers write it there, e.g. server-filesystem's `read_file`).
fn deprecated(tool: &Value) -> bool {
    tool["description"]
        .as_str()
        .is_some_and(|d| d.to_ascii_lowercase().contains("deprecated"))
}

fn next_steps(tools: &[Value], tools_path: &Path, policy_path: &Path, run: &str) -> String {
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    let old: Vec<&str> = tools
        .iter()
        .filter(|t| deprecated(t))
        .filter_map(|t| t["name"].as_str())
        .collect();
    // The example rule names a tool the server does not call deprecated.
    let example = tools
        .iter()
        .filter(|t| !deprecated(t))
        .find_map(|t| t["name"].as_str())
        .or(names.first().copied())
        .unwrap_or("TOOL");
    let old = match old.as_slice() {
        [] => String::new(),
        old => format!(
            "     The server calls these deprecated (in their descriptions); prefer what they name: {}.\n",
            old.join(", ")
        ),
    };
    format!(
        "Wrote {tools} ({count} tools, each pinned to the definition the server advertises now: {names})
and {policy} (no rules: nothing is allowed), and {cedar} (a Cedar policy to use instead, its
examples commented out: nothing is allowed).

Next:
  1. In {tools}, keep only the tools the agent may call. For each, replace \"effect\"
     (\"{EFFECT_PLACEHOLDER}\") with what the tool does, check \"purpose\", and choose its
     \"resource\": {{\"fixed\": …}} or {{\"argument\": \"NAME\"}} (a string argument, e.g. a path).
     The gate refuses to start while a placeholder is left.
{old}  2. In {policy}, add one rule per allowed call, e.g.
     {{\"tool\": \"{example}\", \"effect\": \"read\", \"resource\": \"{example}\", \"requires_approval\": false}}
  3. Run the gate in place of the server (in your MCP client's configuration):
     {run}

If the server changes a pinned tool's definition, the gate hides the tool and refuses its
calls (tool_definition_changed) until you review it and re-pin it (run init again into
another directory and copy the new \"pin\").
",
        tools = tools_path.display(),
        policy = policy_path.display(),
        cedar = policy_path.with_extension("cedar").display(),
        count = names.len(),
        names = names.join(", "),
    )
}

/// Starts the server (or connects to it), completes the MCP handshake (declaring
/// `capabilities`) and reads every page of `tools/list`.
pub(crate) async fn list_server_tools(
    server: &Server,
    capabilities: &Value,
    limit: Duration,
) -> Result<Vec<Value>, String> {
    let (upstream, stopper) = server
        .start(16 << 20)
        .map_err(|e| format!("cannot start the server {}: {e}", server.name()))?
        .split();
    let mut connection = upstream.connection;
    let listed = tokio::time::timeout(limit, handshake_and_list(&mut connection, capabilities)).await;
    drop(connection);
    stopper.stop(Duration::from_secs(2)).await;
    listed.map_err(|_| format!("the server did not list its tools within {limit:?}"))?
}

async fn handshake_and_list(connection: &mut Connection, capabilities: &Value) -> Result<Vec<Value>, String> {
    let initialize = json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                            "clientInfo": {"name": "aml-mcp-gate-init", "version": env!("CARGO_PKG_VERSION")}});
    request(connection, 1, "initialize", initialize).await?;
    send(
        connection,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await?;
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for id in 2..66 {
        let params = cursor.map_or_else(|| json!({}), |c| json!({"cursor": c}));
        let result = request(connection, id, "tools/list", params).await?;
        match result["tools"].as_array() {
            Some(page) => tools.extend(page.iter().cloned()),
            None => return Err("the server's tools/list answer has no \"tools\" array".into()),
        }
        match result["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(tools),
        }
    }
    Err("the server's tools/list has more than 64 pages".into())
}

async fn send(connection: &Connection, message: Value) -> Result<(), String> {
    connection
        .outgoing
        .send(Bytes::from(message.to_string()))
        .await
        .map_err(|_| "the server closed its input".to_owned())
}

/// Sends one request and waits for its answer; requests from the server meanwhile are
/// answered "method not found", notifications ignored.
async fn request(connection: &mut Connection, id: u64, method: &str, params: Value) -> Result<Value, String> {
    send(
        connection,
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    )
    .await?;
    loop {
        let inbound = connection
            .incoming
            .recv()
            .await
            .ok_or_else(|| format!("the server exited before it answered {method}"))?;
        let Inbound::Message(bytes) = inbound else {
            return Err(format!(
                "the server sent a message over the size limit while answering {method}"
            ));
        };
        let message: Value = aml_core::strict::parse_slice(&bytes).map_err(|e| {
            format!("the server sent something that is not JSON ({e}) while answering {method}")
        })?;
        if message.get("method").is_some() {
            if let Some(their_id) = message.get("id") {
                let refusal = json!({"jsonrpc": "2.0", "id": their_id,
                                     "error": {"code": -32601, "message": "aml-mcp-gate init answers no requests"}});
                send(connection, refusal).await?;
            }
            continue;
        }
        if message["id"] != json!(id) {
            continue;
        }
        if let Some(error) = message.get("error") {
            return Err(format!("the server answered {method} with an error: {error}"));
        }
        return message
            .get("result")
            .cloned()
            .ok_or_else(|| format!("the server's answer to {method} has no result"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_skeleton_pins_every_tool_and_cannot_load_until_edited() {
        let tools = [
            json!({"name": "echo", "description": "Echoes", "inputSchema": {"type": "object"}, "title": "E"}),
            json!({"name": "add", "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}}}}),
        ];
        let document = skeleton(&tools).unwrap();
        let entries = document["tools"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        for (entry, tool) in entries.iter().zip(&tools) {
            let digest = definition_digest(tool).unwrap();
            assert_eq!(entry["pin"], pin_text(&digest));
            assert_eq!(entry["input_schema"], tool["inputSchema"]);
        }
        let error = aml_core::ToolCatalog::from_json(&document.to_string()).unwrap_err();
        assert!(error.to_string().contains("CHOOSE ONE"), "{error}");
        let chosen = document.to_string().replace(EFFECT_PLACEHOLDER, "read");
        let catalog = aml_core::ToolCatalog::from_json(&chosen).unwrap();
        assert_eq!(
            catalog.get("echo").unwrap().pin(),
            Some(&definition_digest(&tools[0]).unwrap())
        );
        assert!(skeleton(&[json!({"name": "x"})]).is_err(), "no input schema");
    }

    #[test]
    fn the_starter_cedar_policy_loads_allows_nothing_and_cannot_be_injected_by_a_tool_name() {
        let tools = vec![
            serde_json::json!({"name": "read_file"}),
            serde_json::json!({"name": "evil\npermit(principal, action, resource);\n//"}),
            serde_json::json!({"name": "quote\"back\\slash"}),
        ];
        let text = super::starter_cedar(&tools);
        assert!(
            text.lines().all(|l| l.is_empty() || l.starts_with("//")),
            "{text}"
        );
        let policy = aml_core::Policy::from_cedar(&text, None);
        assert!(policy.error().is_none(), "{:?}", policy.error());
        assert_eq!(
            policy.decide("read_file", aml_core::Effect::Read, "docs/a").0,
            aml_core::Decision::Deny
        );
        assert!(!policy.may_allow("anything", aml_core::Effect::Read));
        let uncommented: String = text
            .lines()
            .map(|l| l.strip_prefix("// ").unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n");
        let body = uncommented.split("\n\n").skip(1).collect::<Vec<_>>().join("\n");
        let examples = aml_core::Policy::from_cedar(&body, None);
        assert!(
            examples.error().is_none(),
            "the examples parse once uncommented: {:?}",
            examples.error()
        );
        assert_eq!(
            examples.decide("read_file", aml_core::Effect::Read, "docs/a").0,
            aml_core::Decision::Allow
        );
    }
}
