//! Typos in the host's files are warned of, at start and on reload, instead of failing
//! silently: a policy rule naming a tool the tools file does not register, a registered tool
//! the server does not list (once the gate has seen the server's list), and a resource
//! argument the tool's input schema does not define (before, that showed only at call time,
//! as a refused call).

use crate::raw;

use serde_json::{json, Value};

use raw::{gate_options, raw_server, wait_for, StdioGate};

fn tools(names: &[(&str, Value)]) -> String {
    let entries: Vec<Value> = names
        .iter()
        .map(|(name, resource)| {
            json!({"name": name, "effect": "read", "purpose": "p", "resource": resource,
                   "input_schema": {"type": "object", "properties": {"message": {"type": "string"}}}})
        })
        .collect();
    json!({ "tools": entries }).to_string()
}

fn policy(tools: &[&str]) -> String {
    let rules: Vec<Value> = tools
        .iter()
        .map(|t| json!({"tool": t, "effect": "read", "resource": "r", "requires_approval": false}))
        .collect();
    json!({"protocol": "aml-action-policy/1", "rules": rules}).to_string()
}

fn list(gate: &mut StdioGate, id: u64) {
    gate.send_json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
    let answer = gate.recv();
    assert_eq!(answer["id"], id, "{answer}");
}

#[test]
fn typos_are_warned_of_at_start_on_reload_and_when_the_servers_list_is_seen() {
    let dir = raw::work("typos");
    let registered = [
        ("echo", json!({"argument": "mesage"})),
        ("sned", json!({"fixed": "r"})),
    ];
    std::fs::write(dir.join("tools.json"), tools(&registered)).unwrap();
    std::fs::write(dir.join("policy.json"), policy(&["echo", "sned", "ecoh"])).unwrap();
    let mut gate = StdioGate::start(&dir, &gate_options(&dir), &raw_server(&dir));
    // At start, from the files alone.
    wait_for("the warnings at start", || {
        gate.stderr().contains("policy in force")
    });
    let stderr = gate.stderr();
    assert!(
        stderr.contains("rule for tool \"ecoh\", which the tools file does not register"),
        "{stderr}"
    );
    assert!(
        stderr.contains("tool \"echo\" takes its resource from argument \"mesage\", which its input schema does not define"),
        "{stderr}"
    );
    // Once the server's list is seen: `sned` is registered, and the server has no such tool.
    let missing = "registers a tool the server does not list";
    assert!(!stderr.contains(missing), "{stderr}");
    gate.initialize();
    list(&mut gate, 1);
    wait_for("the missing tool's warning", || gate.stderr().contains(missing));
    let line = |text: &str| {
        text.lines()
            .filter(|l| l.contains(missing))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert!(line(&gate.stderr())[0].contains("tool=sned"), "{}", gate.stderr());
    // Listed again, the same tool missing: not warned again.
    list(&mut gate, 2);
    assert_eq!(line(&gate.stderr()).len(), 1, "{}", gate.stderr());

    // A reload: `sned` fixed to `send`, a new typo `ehco` registered, a rule for `nope`.
    let fixed = [
        ("echo", json!({"argument": "message"})),
        ("send", json!({"fixed": "r"})),
        ("ehco", json!({"fixed": "r"})),
    ];
    std::fs::write(dir.join("tools.json"), tools(&fixed)).unwrap();
    std::fs::write(dir.join("policy.json"), policy(&["echo", "send", "ehco", "nope"])).unwrap();
    raw::signal(&gate, "HUP");
    wait_for("the reload", || gate.stderr().contains("reloaded"));
    let stderr = gate.stderr();
    assert!(
        stderr.contains("rule for tool \"nope\", which the tools file does not register"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("takes its resource from argument").count(),
        1,
        "the argument typo is fixed: {stderr}"
    );
    list(&mut gate, 3);
    wait_for("the new missing tool's warning", || {
        line(&gate.stderr()).len() == 2
    });
    assert!(line(&gate.stderr())[1].contains("tool=ehco"), "{}", gate.stderr());
    gate.close();
    assert_eq!(gate.wait().code(), Some(0), "{}", gate.stderr());
}
