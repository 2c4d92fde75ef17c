//! Interop: the official Python MCP SDK client (`mcp` on PyPI) calls tools through
//! `aml-mcp-gate` in front of the reference filesystem server
//! (`@modelcontextprotocol/server-filesystem` on npm). Neither peer was written here.
//!
//! `scripts/interop-setup` installs both into `target/interop`; `scripts/test` runs it.
//! Without them this test fails, naming the setup to run.

mod page;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Value};

fn interop_dir() -> PathBuf {
    // Each panics, naming the setup script, when its peer is missing.
    aml_test_support::python();
    aml_test_support::node_bin("mcp-server-filesystem");
    aml_test_support::interop_dir()
}

fn gate_binary() -> PathBuf {
    crate::bins::gate()
}

fn write_json(path: &Path, value: &Value) {
    std::fs::write(path, value.to_string()).unwrap();
}

#[test]
fn python_sdk_client_through_the_gate_to_the_filesystem_server() {
    let peers = interop_dir();
    let work = aml_test_support::scratch_dir("interop-mcp", "filesystem");
    let files = work.join("files");
    std::fs::create_dir_all(&files).unwrap();
    // The filesystem server reports real paths; resolve ours the same way.
    let files = files.canonicalize().unwrap();
    let readable = files.join("report.txt");
    std::fs::write(&readable, "quarterly numbers").unwrap();
    let forbidden = files.join("planted.txt");

    let path_schema = |extra: Value| {
        let mut props = json!({"path": {"type": "string"}});
        props
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let required: Vec<&String> = props.as_object().unwrap().keys().collect();
        json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
    };
    write_json(
        &work.join("policy.json"),
        &json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "read_text_file", "effect": "read", "resource": readable, "requires_approval": false}]}),
    );
    write_json(
        &work.join("tools.json"),
        &json!({"tools": [
        {"name": "read_text_file", "effect": "read", "purpose": "Read a report for the user",
         "resource": {"argument": "path"}, "input_schema": path_schema(json!({}))},
        {"name": "write_file", "effect": "write", "purpose": "Save a file for the user",
         "resource": {"argument": "path"}, "input_schema": path_schema(json!({"content": {"type": "string"}}))}]}),
    );

    let command = json!([
        gate_binary(),
        "--policy",
        work.join("policy.json"),
        "--tools",
        work.join("tools.json"),
        "--receipts",
        work.join("receipts.jsonl"),
        "--",
        peers.join("node/node_modules/.bin/mcp-server-filesystem"),
        files,
    ]);
    let calls = json!([
        {"name": "read_text_file", "arguments": {"path": readable}},
        {"name": "write_file", "arguments": {"path": forbidden, "content": "the agent was here"}},
        {"name": "list_directory", "arguments": {"path": files}},
    ]);
    let out = Command::new(peers.join("venv/bin/python"))
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/interop/mcp_client.py"))
        .arg(command.to_string())
        .arg(calls.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();

    // tools/list is filtered: registered tools the policy can allow (write_file has no rule;
    // list_directory is not registered).
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tools, ["read_text_file"]);

    let [read, write, list] = report["results"].as_array().unwrap().as_slice() else {
        panic!("{report}")
    };
    assert_eq!(read["is_error"], false);
    assert!(read["text"].as_str().unwrap().contains("quarterly numbers"));
    assert_eq!(
        read["meta"]["aml.action-boundary/verdict"]["receipt"]["reason"],
        "host_dispatch_returned"
    );

    assert_eq!(write["is_error"], true);
    assert_eq!(
        write["meta"]["aml.action-boundary/verdict"]["receipt"]["reason"],
        "no_exact_rule"
    );
    assert!(!forbidden.exists(), "a denied call reached the server");

    assert_eq!(
        list["meta"]["aml.action-boundary/verdict"]["rejection"],
        "invalid_or_unregistered_call"
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// A scratch tree for server-filesystem: `docs/a.txt`, `docs/b.txt`, `out/`, `secret.txt` under
/// `files/` (canonical, as the server reports paths), and `outside.txt` beside it.
fn filesystem_tree(tag: &str) -> (PathBuf, PathBuf) {
    let work = aml_test_support::scratch_dir("interop", tag);
    let files = work.join("files");
    std::fs::create_dir_all(files.join("docs")).unwrap();
    std::fs::create_dir_all(files.join("out")).unwrap();
    let files = files.canonicalize().unwrap();
    std::fs::write(files.join("docs/a.txt"), "alpha notes").unwrap();
    std::fs::write(files.join("docs/b.txt"), "beta notes").unwrap();
    std::fs::write(files.join("secret.txt"), "the secret").unwrap();
    std::fs::write(work.join("outside.txt"), "outside the root").unwrap();
    (work, files)
}

/// The filesystem tools with typed path resources under `root`.
fn typed_filesystem_tools(root: &Path) -> Value {
    let typed = |mut rule: Value| {
        rule["as"] = json!("path");
        rule["root"] = json!(root);
        rule
    };
    let strings = |names: &[&str]| -> Value {
        let props: serde_json::Map<String, Value> = names
            .iter()
            .map(|n| (n.to_string(), json!({"type": "string"})))
            .collect();
        json!({"type": "object", "properties": props, "required": names, "additionalProperties": false})
    };
    json!({"tools": [
        {"name": "read_text_file", "effect": "read", "purpose": "Read a document",
         "resource": typed(json!({"argument": "path"})), "input_schema": strings(&["path"])},
        {"name": "write_file", "effect": "write", "purpose": "Save a document",
         "resource": typed(json!({"argument": "path"})), "input_schema": strings(&["path", "content"])},
        {"name": "move_file", "effect": "write", "purpose": "Move a document",
         "resource": typed(json!({"arguments": ["source", "destination"]})),
         "input_schema": strings(&["source", "destination"])},
        {"name": "read_multiple_files", "effect": "read", "purpose": "Read documents",
         "resource": typed(json!({"argument": "paths", "each": true})),
         "input_schema": {"type": "object", "properties": {"paths": {"type": "array", "items": {"type": "string"}}},
                          "required": ["paths"], "additionalProperties": false}}]})
}

/// Runs the official Python SDK client: the gate (with `gate_args`) in front of
/// server-filesystem serving `files`, whose raw stdin is copied to `stdin_log`.
fn through_gate_to_filesystem(gate_args: Value, files: &Path, stdin_log: &Path, calls: &Value) -> Value {
    let out = sdk_client(gate_args, files, stdin_log, calls).output().unwrap();
    assert!(
        out.status.success(),
        "python client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The official Python SDK client's command, for [`through_gate_to_filesystem`]; the gate's
/// stderr is the client's.
fn sdk_client(gate_args: Value, files: &Path, stdin_log: &Path, calls: &Value) -> Command {
    let peers = interop_dir();
    let mut command = vec![json!(gate_binary())];
    command.extend(gate_args.as_array().unwrap().iter().cloned());
    command.extend([
        json!("--"),
        json!("sh"),
        json!("-c"),
        json!("tee -a \"$0\" | \"$1\" \"$2\""),
        json!(stdin_log),
        json!(peers.join("node/node_modules/.bin/mcp-server-filesystem")),
        json!(files),
    ]);
    let mut client = Command::new(peers.join("venv/bin/python"));
    client
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/interop/mcp_client.py"))
        .arg(Value::from(command).to_string())
        .arg(calls.to_string());
    client
}

/// Each result's rejection, or else its receipt's reason.
fn outcomes(report: &Value) -> Vec<String> {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|result| {
            let verdict = &result["meta"]["aml.action-boundary/verdict"];
            verdict["rejection"]
                .as_str()
                .or_else(|| verdict["receipt"]["reason"].as_str())
                .unwrap_or_else(|| panic!("no verdict: {result}"))
                .to_owned()
        })
        .collect()
}

/// The `tools/call` lines that reached the server, as it read them.
fn calls_reaching(stdin_log: &Path) -> Vec<String> {
    std::fs::read_to_string(stdin_log)
        .unwrap()
        .lines()
        .filter(|line| line.contains("\"tools/call\""))
        .map(str::to_owned)
        .collect()
}

/// Each line of `text` as JSON (a receipts file, `journal receipts` output).
fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// Typed path resources and several resources per call, from outside: the official Python
/// SDK client, the gate, and server-filesystem behind it with its raw stdin copied to a log.
/// Spellings of one path decide alike; paths out of the root are refused before the server;
/// a move out of a protected file and a read of several files with one protected among them
/// are refused whole; nothing refused reaches the server.
#[test]
fn typed_path_resources_decide_every_spelling_alike_and_nothing_refused_reaches_the_filesystem_server() {
    let (work, files) = filesystem_tree("typed");
    let stdin_log = work.join("server-stdin.log");
    let root = files.to_str().unwrap();
    write_json(&work.join("tools.json"), &typed_filesystem_tools(&files));
    let rule = |tool: &str, effect: &str, resource: &str| json!({"tool": tool, "effect": effect, "resource": resource, "requires_approval": false});
    write_json(
        &work.join("policy.json"),
        &json!({"protocol": "aml-action-policy/1", "rules": [
            rule("read_text_file", "read", "docs/a.txt"),
            rule("read_multiple_files", "read", "docs/a.txt"),
            rule("read_multiple_files", "read", "docs/b.txt"),
            rule("move_file", "write", "docs/b.txt"),
            rule("move_file", "write", "out/b.md")]}),
    );
    let gate_args = json!([
        "--policy",
        work.join("policy.json"),
        "--tools",
        work.join("tools.json"),
        "--state",
        "memory"
    ]);
    let absolute = format!("{root}/docs/a.txt");
    let calls = json!([
        {"name": "read_text_file", "arguments": {"path": "./docs/a.txt"}},
        {"name": "read_text_file", "arguments": {"path": absolute}},
        {"name": "read_text_file", "arguments": {"path": "docs//a.txt"}},
        {"name": "read_text_file", "arguments": {"path": "docs/../secret.txt"}},
        {"name": "read_text_file", "arguments": {"path": "/etc/passwd"}},
        {"name": "read_text_file", "arguments": {"path": "../outside.txt"}},
        {"name": "move_file", "arguments": {"source": "secret.txt", "destination": "out/b.md"}},
        {"name": "read_multiple_files", "arguments": {"paths": ["docs/a.txt", "secret.txt"]}},
        {"name": "read_multiple_files", "arguments": {"paths": ["docs/a.txt", "./docs/b.txt"]}},
        {"name": "move_file", "arguments": {"source": "docs/b.txt", "destination": "out/b.md"}},
    ]);
    let report = through_gate_to_filesystem(gate_args, &files, &stdin_log, &calls);
    assert_eq!(
        outcomes(&report),
        [
            "host_dispatch_returned",
            "host_dispatch_returned",
            "host_dispatch_returned",
            "no_exact_rule",
            "resource_outside_root",
            "resource_outside_root",
            "no_exact_rule",
            "no_exact_rule",
            "host_dispatch_returned",
            "host_dispatch_returned",
        ],
        "{report}"
    );
    let results = report["results"].as_array().unwrap();
    for (i, read) in results.iter().take(3).enumerate() {
        assert_eq!(read["text"], "alpha notes", "call {i}: {read}");
    }
    let both = results[8]["text"].as_str().unwrap();
    assert!(
        both.contains("alpha notes") && both.contains("beta notes"),
        "{both}"
    );
    assert!(
        files.join("secret.txt").exists(),
        "the protected file was not moved"
    );
    assert_eq!(
        std::fs::read_to_string(files.join("out/b.md")).unwrap(),
        "beta notes"
    );
    let reached = calls_reaching(&stdin_log);
    assert_eq!(
        reached.len(),
        5,
        "only the allowed calls reached the server: {reached:#?}"
    );
    for refused in ["secret.txt", "/etc/passwd", "outside.txt"] {
        assert!(
            !reached.iter().any(|l| l.contains(refused)),
            "{refused} reached the server: {reached:#?}"
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// The issue's three goals with a Cedar policy, from outside: (a) anything under `docs/` is
/// readable without approval, a file created after the gate started included; (b) a write
/// under `out/` asks for approval (this gate has no approver: blocked, not run); (c) nothing
/// else: writes elsewhere, reads outside `docs/`, and a move out of `docs/` are denied. The
/// records name the determining policies; nothing refused reaches the server.
#[test]
fn a_cedar_policy_scopes_the_filesystem_server_by_directory() {
    let (work, files) = filesystem_tree("cedar");
    let stdin_log = work.join("server-stdin.log");
    write_json(&work.join("tools.json"), &typed_filesystem_tools(&files));
    std::fs::write(
        work.join("policy.cedar"),
        r#"
@id("read-docs")
permit(principal, action in [Action::"read_text_file", Action::"read_multiple_files"], resource)
when { context.resource like "docs/*" };

@id("write-out")
@approval("required")
permit(principal, action in [Action::"write_file", Action::"move_file"], resource)
when { context.resource like "out/*" };
"#,
    )
    .unwrap();
    let receipts = work.join("receipts.jsonl");
    let gate_args = json!([
        "--policy",
        work.join("policy.cedar"),
        "--tools",
        work.join("tools.json"),
        "--state",
        "memory",
        "--receipts",
        receipts
    ]);
    let calls = json!([
        {"name": "read_text_file", "arguments": {"path": "docs/a.txt"}},
        {"create": files.join("docs/later.txt"), "content": "written after the gate started"},
        {"name": "read_text_file", "arguments": {"path": "./docs//later.txt"}},
        {"name": "read_multiple_files", "arguments": {"paths": ["docs/a.txt", "docs/later.txt"]}},
        {"name": "write_file", "arguments": {"path": "out/r.md", "content": "report"}},
        {"name": "write_file", "arguments": {"path": "docs/a.txt", "content": "overwritten"}},
        {"name": "read_text_file", "arguments": {"path": "secret.txt"}},
        {"name": "move_file", "arguments": {"source": "docs/a.txt", "destination": "out/a.md"}},
        {"name": "read_multiple_files", "arguments": {"paths": ["docs/a.txt", "secret.txt"]}},
    ]);
    let report = through_gate_to_filesystem(gate_args, &files, &stdin_log, &calls);
    assert_eq!(
        outcomes(&report),
        [
            "host_dispatch_returned",
            "host_dispatch_returned",
            "host_dispatch_returned",
            "approval_unavailable",
            "no_permit",
            "no_permit",
            "no_permit",
            "no_permit",
        ],
        "{report}"
    );
    let results = report["results"].as_array().unwrap();
    assert_eq!(results[1]["text"], "written after the gate started");
    assert_eq!(
        report["tools"],
        json!(["move_file", "read_multiple_files", "read_text_file", "write_file"])
    );
    assert_eq!(
        std::fs::read_to_string(files.join("docs/a.txt")).unwrap(),
        "alpha notes"
    );
    assert!(!files.join("out/r.md").exists() && !files.join("out/a.md").exists());
    assert_eq!(
        calls_reaching(&stdin_log).len(),
        3,
        "only the three reads reached the server"
    );
    let records: Vec<Value> = json_lines(&std::fs::read_to_string(&receipts).unwrap())
        .into_iter()
        .filter(|r| r["record"] == "aml-call-record/1")
        .collect();
    assert_eq!(records.len(), 8, "{records:#?}");
    assert_eq!(records[0]["policies"], json!(["read-docs"]));
    assert_eq!(records[3]["policies"], json!(["write-out"]));
    assert!(
        records[4].get("policies").is_none(),
        "no permit: nothing determined it but silence"
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// The Cedar policy's approval from outside, end to end: the gate runs with `--approve web`,
/// the official Python SDK client calls through it, and this test approves as a person would,
/// on the page's JSON API. The approved write under `out/` reaches server-filesystem exactly
/// once with the approved bytes; the declined one never reaches it; reads under `docs/` ask
/// nobody.
#[test]
fn an_approved_write_reaches_the_filesystem_server_once_and_a_declined_one_never() {
    const WAIT: Duration = Duration::from_secs(60);
    let (work, files) = filesystem_tree("cedar-approve");
    let stdin_log = work.join("server-stdin.log");
    write_json(&work.join("tools.json"), &typed_filesystem_tools(&files));
    std::fs::write(
        work.join("policy.cedar"),
        r#"
@id("read-docs")
permit(principal, action == Action::"read_text_file", resource)
when { context.resource like "docs/*" };

@id("write-out")
@approval("required")
permit(principal, action == Action::"write_file", resource)
when { context.resource like "out/*" };
"#,
    )
    .unwrap();
    let receipts = work.join("receipts.jsonl");
    let gate_args = json!([
        "--policy",
        work.join("policy.cedar"),
        "--tools",
        work.join("tools.json"),
        "--state",
        "memory",
        "--receipts",
        receipts,
        // A failing test ends its pending calls within the test's own bound.
        "--approve",
        "web",
        "--approval-timeout",
        "60"
    ]);
    let calls = json!([
        {"name": "read_text_file", "arguments": {"path": "docs/a.txt"}},
        {"name": "write_file", "arguments": {"path": "out/r.md", "content": "approved report"}},
        {"name": "write_file", "arguments": {"path": "out/s.md", "content": "declined report"}},
        {"name": "read_text_file", "arguments": {"path": "docs/b.txt"}},
    ]);
    let mut command = sdk_client(gate_args, &files, &stdin_log, &calls);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut client = aml_test_support::Child::spawn("the Python SDK client", &mut command);
    let log = client.stderr_lines();
    let page = page::Page::from_log(&log, WAIT);

    // The client waits on the write; the page shows it, and nothing of it reached the server.
    let approved = page.next_pending(&[], WAIT);
    assert_eq!(
        (&approved["tool"], &approved["resource"]),
        (&json!("write_file"), &json!("out/r.md")),
        "the first request for approval is the write, not a read: {approved}"
    );
    assert_eq!(
        approved["arguments"],
        json!({"path": "out/r.md", "content": "approved report"})
    );
    let canonical = approved["canonical_json"].as_str().unwrap();
    let frozen = aml_core::FrozenProposal::from_value(&serde_json::from_str(canonical).unwrap()).unwrap();
    assert_eq!(
        frozen.canonical_json(),
        canonical,
        "the page shows canonical bytes"
    );
    assert_eq!(
        approved["proposal_sha256"],
        frozen.digest().to_string(),
        "bound to what it shows"
    );
    assert!(!files.join("out/r.md").exists(), "written before approval");
    assert!(!calls_reaching(&stdin_log).iter().any(|l| l.contains("out/r.md")));
    assert_eq!(page.decide(&approved, "approve")["outcome"], "approved");

    let declined = page.next_pending(&[&approved], WAIT);
    assert_eq!(declined["resource"], "out/s.md", "{declined}");
    assert_eq!(page.decide(&declined, "deny")["outcome"], "denied");

    let out = client.output(WAIT);
    assert!(out.status.success(), "python client failed: {:?}", log.so_far());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        outcomes(&report),
        [
            "host_dispatch_returned",
            "host_dispatch_returned",
            "approval_missing_or_mismatched",
            "host_dispatch_returned"
        ],
        "{report}"
    );
    let results = report["results"].as_array().unwrap();
    assert_eq!(
        (&results[0]["text"], &results[3]["text"]),
        (&json!("alpha notes"), &json!("beta notes"))
    );
    assert_eq!(results[2]["is_error"], true);

    // The file holds exactly the approved content; the declined one was never written.
    assert_eq!(
        std::fs::read_to_string(files.join("out/r.md")).unwrap(),
        "approved report"
    );
    assert!(
        !files.join("out/s.md").exists(),
        "a declined write reached the server"
    );
    // The server read three calls: the two reads and the approved write, once, whose
    // arguments are byte for byte those of the approved canonical proposal.
    let reached = calls_reaching(&stdin_log);
    assert_eq!(reached.len(), 3, "{reached:#?}");
    let writes: Vec<&String> = reached.iter().filter(|l| l.contains("\"write_file\"")).collect();
    assert_eq!(writes.len(), 1, "{reached:#?}");
    let approved_arguments = raw_member(canonical, "arguments");
    let forwarded = raw_member(raw_member(writes[0], "params").get(), "arguments");
    assert_eq!(forwarded.get(), approved_arguments.get());
    assert_eq!(
        forwarded.get(),
        r#"{"content":"approved report","path":"out/r.md"}"#
    );

    let lines = json_lines(&std::fs::read_to_string(&receipts).unwrap());
    let records: Vec<&Value> = lines
        .iter()
        .filter(|r| r["record"] == "aml-call-record/1")
        .collect();
    let summary: Vec<String> = records
        .iter()
        .map(|r| {
            let receipt = &r["receipt"];
            let (status, reason) = (&receipt["execution_status"], &receipt["reason"]);
            format!("{} {} {} {}", r["tool"], status, reason, r["policies"])
        })
        .collect();
    assert_eq!(
        summary,
        [
            r#""read_text_file" "dispatched" "host_dispatch_returned" ["read-docs"]"#,
            r#""write_file" "dispatched" "host_dispatch_returned" ["write-out"]"#,
            r#""write_file" "blocked" "approval_missing_or_mismatched" ["write-out"]"#,
            r#""read_text_file" "dispatched" "host_dispatch_returned" ["read-docs"]"#,
        ],
        "{records:#?}"
    );
    assert_eq!(
        records[1]["receipt"]["proposal_sha256"],
        approved["proposal_sha256"]
    );
    // Two decisions were asked for and made, the writes'; the reads asked nobody.
    let decisions: Vec<Value> = lines
        .iter()
        .filter(|r| r["record"] == "aml-approval-record/1")
        .map(|r| json!([r["statement"]["decision"], r["statement"]["proposal_sha256"]]))
        .collect();
    assert_eq!(
        Value::from(decisions),
        json!([
            ["approve", approved["proposal_sha256"]],
            ["deny", declined["proposal_sha256"]]
        ])
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// The raw text of member `name` of the JSON object `json`, as it is written there.
fn raw_member<'a>(json: &'a str, name: &str) -> &'a RawValue {
    let members: BTreeMap<String, &RawValue> = serde_json::from_str(json).unwrap();
    members
        .get(name)
        .copied()
        .unwrap_or_else(|| panic!("no {name} in {json}"))
}

/// Shadow mode from outside: the same Cedar policy, `--enforce shadow`: the calls it would
/// deny or send for approval reach the server and run, each record says what the policy
/// would have done, and `journal receipts --shadow` lists exactly those.
#[test]
fn shadow_mode_forwards_every_call_and_records_what_the_policy_would_block() {
    let (work, files) = filesystem_tree("shadow");
    let stdin_log = work.join("server-stdin.log");
    write_json(&work.join("tools.json"), &typed_filesystem_tools(&files));
    std::fs::write(
        work.join("policy.cedar"),
        r#"permit(principal, action == Action::"read_text_file", resource) when { context.resource like "docs/*" };
           @approval("required") permit(principal, action == Action::"write_file", resource) when { context.resource like "out/*" };"#,
    )
    .unwrap();
    let state = work.join("state.sqlite3");
    let gate_args = json!([
        "--policy",
        work.join("policy.cedar"),
        "--tools",
        work.join("tools.json"),
        "--state",
        state,
        "--enforce",
        "shadow"
    ]);
    let calls = json!([
        {"name": "read_text_file", "arguments": {"path": "docs/a.txt"}},
        {"name": "read_text_file", "arguments": {"path": "secret.txt"}},
        {"name": "write_file", "arguments": {"path": "out/r.md", "content": "report"}},
        {"name": "read_text_file", "arguments": {"path": "/etc/passwd"}},
    ]);
    let report = through_gate_to_filesystem(gate_args, &files, &stdin_log, &calls);
    assert_eq!(
        outcomes(&report),
        [
            "host_dispatch_returned",
            "host_dispatch_returned",
            "host_dispatch_returned",
            "resource_outside_root"
        ],
        "{report}"
    );
    assert_eq!(
        report["results"][1]["text"], "the secret",
        "shadow mode enforced nothing"
    );
    assert_eq!(std::fs::read_to_string(files.join("out/r.md")).unwrap(), "report");
    assert_eq!(
        calls_reaching(&stdin_log).len(),
        3,
        "a path out of the root is still refused"
    );
    let shadowed = Command::new(gate_binary())
        .args(["journal", "receipts", "--shadow", "--state"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(
        shadowed.status.success(),
        "{}",
        String::from_utf8_lossy(&shadowed.stderr)
    );
    let listed = json_lines(&String::from_utf8(shadowed.stdout).unwrap());
    let would: Vec<(&str, &str)> = listed
        .iter()
        .map(|r| {
            (
                r["would_block"]["decision"].as_str().unwrap(),
                r["would_block"]["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        would,
        [("deny", "no_permit"), ("requires_approval", "policy_permit")],
        "{listed:#?}"
    );
    for record in &listed {
        assert_eq!(record["plan"]["reason"], "shadow_mode");
        assert_eq!(record["receipt"]["execution_status"], "dispatched");
    }
    let _ = std::fs::remove_dir_all(&work);
}
