//! Tools of several servers (ADR 033, step 4): registered, listed and gated under their
//! exposed names, sent to their own server under its own name; lists walk the servers.

use super::servers::split;
use super::*;
use crate::relay::names::Naming;

/// Tools `read` of server `files` and `send` of server `mail`, each prefixed, both allowed.
fn routed_tools() -> RelayTools {
    routed_tools_named(Naming::Prefix, Naming::Prefix)
}

fn routed_tools_named(files: Naming, mail: Naming) -> RelayTools {
    let catalog = r#"{"tools": [
        {"name": "read", "server": "files", "effect": "read", "purpose": "Read a file",
         "resource": {"argument": "to"}, "input_schema": {"type": "object"}},
        {"name": "send", "server": "mail", "effect": "send", "purpose": "Send a note",
         "resource": {"argument": "to"}, "input_schema": {"type": "object", "title": "host"}}]}"#;
    let policy = Policy::from_value(&json!({"protocol": "aml-action-policy/1", "rules": [
        {"tool": "files__read", "effect": "read", "resource": "team", "requires_approval": false},
        {"tool": "mail__send", "effect": "send", "resource": "team", "requires_approval": false}]}));
    let boundary = ActionBoundary::builder(Arc::new(policy)).build();
    let servers = [("files".to_owned(), files), ("mail".to_owned(), mail)];
    RelayTools::from_json_for_servers(catalog, boundary, &servers).unwrap()
}

fn routed() -> Machine {
    Machine::with_servers(routed_tools(), RelayConfig::default(), &["files", "mail"])
}

fn call(id: &str, tool: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {"to": "team"}}})
}

#[test]
fn a_call_goes_to_its_tools_server_under_that_servers_own_name() {
    let tools = routed_tools();
    for (tool, server) in [("files__read", "files"), ("mail__send", "mail")] {
        for gate in [tools.gate(), tools.retry_gate()] {
            let catalog = gate.gate().catalog();
            assert_eq!(
                catalog.get(tool).unwrap().server(),
                Some(server),
                "records name it"
            );
        }
    }
    let mut m = routed();
    for (id, tool, server, own) in [("a", "mail__send", 1, "send"), ("b", "files__read", 0, "read")] {
        let sent = m.client_says(call(id, tool));
        let [flight] = &sent.calls[..] else {
            panic!("checked: {tool}")
        };
        assert_eq!(m.call_target(flight), Some((server, own)));
    }
    // A server's own name is not a name the client can call.
    let sent = m.client_says(call("c", "send"));
    assert!(
        sent.calls.len() == 1,
        "checked, then refused by the gate as unregistered"
    );
    assert_eq!(m.call_target(&sent.calls[0]), Some((0, "send")));
}

#[test]
fn a_call_to_a_gone_servers_tool_is_refused_and_the_others_still_run() {
    let mut m = routed();
    m.server_gone(1, "it exited");
    let refused = m.client_says(call("a", "mail__send"));
    assert!(refused.calls.is_empty());
    assert!(
        refused.client[0].to_string().contains("it exited"),
        "{}",
        refused.client[0]
    );
    assert_eq!(m.client_says(call("b", "files__read")).calls.len(), 1);
}

fn list(id: &str, cursor: Option<&str>) -> Value {
    match cursor {
        Some(cursor) => {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {"cursor": cursor}})
        }
        None => json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}),
    }
}

fn up_one(sent: Vec<Sent>) -> (usize, Value) {
    let [Sent::Upstream(server, bytes)] = &sent[..] else {
        panic!("one message up: {sent:?}")
    };
    (*server, serde_json::from_slice(bytes).unwrap())
}

#[test]
fn the_tool_list_walks_the_servers_under_the_gates_cursor_with_exposed_names() {
    let mut m = routed();
    let (server, up) = up_one(m.client(msg(list("l1", None))));
    assert_eq!(server, 0);
    assert!(up.get("params").is_none());
    let page = json!({"jsonrpc": "2.0", "id": up["id"], "result": {"tools": [
        {"name": "read", "description": "Reads", "inputSchema": {}}, {"name": "unregistered", "inputSchema": {}}],
        "nextCursor": "p2"}});
    let answer = &m.server_says(page).client[0];
    assert_eq!(answer["id"], "l1");
    let tools = answer["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(
        (&tools[0]["name"], &tools[0]["description"]),
        (&json!("files__read"), &json!("Reads"))
    );
    assert_eq!(answer["result"]["nextCursor"], "0.p2");
    let (server, up) = up_one(m.client(msg(list("l2", Some("0.p2")))));
    assert_eq!(
        (server, &up["params"]["cursor"]),
        (0, &json!("p2")),
        "the server's own cursor"
    );
    let last = json!({"jsonrpc": "2.0", "id": up["id"], "result": {"tools": []}});
    assert_eq!(m.server_says(last).client[0]["result"]["nextCursor"], "1.");
    let (server, up) = up_one(m.client(msg(list("l3", Some("1.")))));
    assert_eq!(server, 1);
    assert_eq!(up["params"], json!({}), "a first page has no cursor");
    let mail =
        json!({"jsonrpc": "2.0", "id": up["id"], "result": {"tools": [{"name": "send", "inputSchema": {}}]}});
    let (_, client) = split(m.server_at(1, msg(mail)));
    let result = &client[0]["result"];
    assert_eq!(result["tools"][0]["name"], "mail__send");
    assert_eq!(
        result["tools"][0]["inputSchema"],
        json!({"type": "object", "title": "host"})
    );
    assert!(result.get("nextCursor").is_none(), "the last server's last page");
}

#[test]
fn a_cursor_the_gate_did_not_give_or_whose_server_is_gone_is_refused() {
    let mut m = routed();
    for cursor in ["p2", "7.x", "a.b", "", "+1.", "01.", "-0."] {
        let sent = m.client_says(list("l", Some(cursor)));
        assert!(sent.upstream.is_empty(), "{cursor:?} sent");
        assert_eq!(
            sent.client[0]["error"]["code"],
            jsonrpc::INVALID_PARAMS,
            "{cursor:?}"
        );
    }
    m.server_gone(1, "it exited");
    let sent = m.client_says(list("l", Some("1.")));
    assert_eq!(sent.client[0]["error"]["code"], jsonrpc::INVALID_PARAMS);
    let up = m.relayed(json!("l"), "tools/list");
    let last = json!({"jsonrpc": "2.0", "id": up["id"], "result": {"tools": []}});
    assert!(
        m.server_says(last).client[0]["result"]
            .get("nextCursor")
            .is_none(),
        "no next server"
    );
}

#[test]
fn a_tools_file_for_several_servers_names_each_tools_server_once() {
    let boundary = || {
        ActionBoundary::builder(Arc::new(Policy::from_value(
            &json!({"protocol": "aml-action-policy/1", "rules": []}),
        )))
        .build()
    };
    let servers = [
        ("files".to_owned(), Naming::Never),
        ("mail".to_owned(), Naming::Never),
    ];
    let tool = |name: &str, server: Option<&str>| {
        let mut tool = json!({"name": name, "effect": "read", "purpose": "p", "resource": {"argument": "to"}, "input_schema": {"type": "object"}});
        if let Some(server) = server {
            tool["server"] = json!(server);
        }
        tool
    };
    let load = |tools: Vec<Value>| {
        let text = json!({"tools": tools}).to_string();
        RelayTools::from_json_for_servers(&text, boundary(), &servers)
            .map(drop)
            .map_err(|e| e.to_string())
    };
    assert!(load(vec![tool("a", Some("files")), tool("b", Some("mail"))]).is_ok());
    let errors = [
        load(vec![tool("a", None)]).unwrap_err(),
        load(vec![tool("a", Some("web"))]).unwrap_err(),
        load(vec![tool("a", Some("files")), tool("a", Some("mail"))]).unwrap_err(),
    ];
    assert!(errors[0].contains("names no \"server\""), "{}", errors[0]);
    assert!(errors[1].contains("\"web\""), "{}", errors[1]);
    assert!(
        errors[2].contains("files") && errors[2].contains("mail"),
        "{}",
        errors[2]
    );
}

#[test]
fn a_reload_keeps_the_servers_and_re_exposes_the_names() {
    let tools = routed_tools();
    let next = r#"{"tools": [{"name": "write", "server": "files", "effect": "write", "purpose": "Write",
                   "resource": {"argument": "to"}, "input_schema": {"type": "object"}}]}"#;
    tools.replace_from_json(next).unwrap();
    assert_eq!(tools.routes().resolve("files__write"), Some((0, "write")));
    let registered = tools
        .gate()
        .gate()
        .catalog()
        .get("files__write")
        .cloned()
        .unwrap();
    assert_eq!(registered.server(), Some("files"), "its records name its server");
    assert_eq!(tools.routes().resolve("files__read"), None);
    let unnamed = r#"{"tools": [{"name": "write", "effect": "write", "purpose": "Write",
                      "resource": {"argument": "to"}, "input_schema": {}}]}"#;
    assert!(
        tools.replace_from_json(unnamed).is_err(),
        "a tool without its server is refused"
    );
    assert_eq!(
        tools.routes().resolve("files__write"),
        Some((0, "write")),
        "and changes nothing"
    );
}

#[test]
fn prompts_are_shown_under_their_servers_naming_and_got_from_their_server() {
    let tools = routed_tools_named(Naming::Prefix, Naming::OnConflict);
    let mut m = Machine::with_servers(tools, RelayConfig::default(), &["files", "mail"]);
    let page = |m: &mut Machine, server: usize, cursor: Option<&str>, prompts: Value| {
        let request = match cursor {
            Some(c) => {
                json!({"jsonrpc": "2.0", "id": "p", "method": "prompts/list", "params": {"cursor": c}})
            }
            None => json!({"jsonrpc": "2.0", "id": "p", "method": "prompts/list"}),
        };
        let (to, up) = up_one(m.client(msg(request)));
        assert_eq!(to, server);
        let answer = json!({"jsonrpc": "2.0", "id": up["id"], "result": {"prompts": prompts}});
        split(m.server_at(server, msg(answer))).1.remove(0)
    };
    let first = page(
        &mut m,
        0,
        None,
        json!([{"name": "summarize", "description": "d"}]),
    );
    assert_eq!(
        first["result"]["prompts"],
        json!([{"description": "d", "name": "files__summarize"}])
    );
    let second = page(
        &mut m,
        1,
        Some("1."),
        json!([{"name": "summarize"}, {"name": "draft"}]),
    );
    let names: Vec<&Value> = second["result"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["name"])
        .collect();
    assert_eq!(
        names,
        [&json!("summarize"), &json!("draft")],
        "no other server shows these bare"
    );
    let get = |m: &mut Machine, name: &str| {
        let request = json!({"jsonrpc": "2.0", "id": "g", "method": "prompts/get", "params": {"name": name}});
        let (server, up) = up_one(m.client(msg(request)));
        m.server_at(
            server,
            msg(json!({"jsonrpc": "2.0", "id": up["id"], "result": {"messages": []}})),
        );
        (server, up["params"]["name"].clone())
    };
    assert_eq!(get(&mut m, "files__summarize"), (0, json!("summarize")));
    assert_eq!(get(&mut m, "summarize"), (1, json!("summarize")));
    assert_eq!(
        get(&mut m, "mail__other"),
        (1, json!("other")),
        "a prefix names its server"
    );
    assert_eq!(
        get(&mut m, "unknown"),
        (0, json!("unknown")),
        "else the first server, as it is"
    );
    let complete = json!({"jsonrpc": "2.0", "id": "c", "method": "completion/complete", "params": {
        "ref": {"type": "ref/prompt", "name": "files__summarize"}, "argument": {"name": "a", "value": "b"}}});
    let (server, up) = up_one(m.client(msg(complete)));
    assert_eq!((server, &up["params"]["ref"]["name"]), (0, &json!("summarize")));
}

#[test]
fn a_resource_goes_to_the_server_that_listed_it_and_one_two_servers_list_to_neither() {
    let mut m = routed();
    let page = |m: &mut Machine, method: &str, server: usize, cursor: Option<&str>, result: Value| {
        let params = cursor.map_or(json!({}), |c| json!({"cursor": c}));
        let request = json!({"jsonrpc": "2.0", "id": "r", "method": method, "params": params});
        let (to, up) = up_one(m.client(msg(request)));
        assert_eq!(to, server);
        let answer = json!({"jsonrpc": "2.0", "id": up["id"], "result": result});
        split(m.server_at(server, msg(answer))).1.remove(0)
    };
    let resource = |uri: &str| json!({"uri": uri, "name": uri});
    page(
        &mut m,
        "resources/list",
        0,
        None,
        json!({"resources": [resource("file:///a"), resource("shared://x")]}),
    );
    let second = page(
        &mut m,
        "resources/list",
        1,
        Some("1."),
        json!({"resources": [resource("mail://inbox"), resource("shared://x")]}),
    );
    assert_eq!(
        second["result"]["resources"],
        json!([resource("mail://inbox")]),
        "the URI listed twice is left out"
    );
    let template = json!({"uriTemplate": "mail://msg/{id}", "name": "message"});
    page(
        &mut m,
        "resources/templates/list",
        1,
        Some("1."),
        json!({"resourceTemplates": [template]}),
    );
    let read = |m: &mut Machine, method: &str, params: Value| {
        // Each under an id of its own: none is answered here.
        let request = json!({"jsonrpc": "2.0", "id": params.to_string(), "method": method, "params": params});
        let sent = m.client(msg(request));
        match &sent[..] {
            [Sent::Upstream(server, _)] => Ok(*server),
            _ => Err(split(sent).1.remove(0)),
        }
    };
    assert_eq!(
        read(&mut m, "resources/read", json!({"uri": "mail://inbox"})),
        Ok(1)
    );
    assert_eq!(
        read(&mut m, "resources/subscribe", json!({"uri": "file:///a"})),
        Ok(0)
    );
    assert_eq!(
        read(&mut m, "resources/read", json!({"uri": "mail://msg/7"})),
        Ok(1),
        "by its template"
    );
    let complete = json!({"ref": {"type": "ref/resource", "uri": "mail://msg/{id}"}, "argument": {"name": "id", "value": "7"}});
    assert_eq!(read(&mut m, "completion/complete", complete), Ok(1));
    assert_eq!(
        read(&mut m, "resources/read", json!({"uri": "other://y"})),
        Ok(0),
        "else the first server"
    );
    let refused = read(&mut m, "resources/read", json!({"uri": "shared://x"})).unwrap_err();
    assert_eq!(refused["error"]["code"], -32002);
    let why = refused["error"]["message"].as_str().unwrap();
    assert!(why.contains("files") && why.contains("mail"), "{why}");
}

#[test]
fn progress_reaches_an_endpoints_request_only_from_the_server_it_was_routed_to() {
    use crate::relay::{EndpointEvent, ToEndpoint};
    let mut m = routed();
    m.open(1, true);
    let progress = |token: &str| {
        msg(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progressToken": token, "progress": 1}}))
    };
    let to_endpoint = |sent: &[Sent]| matches!(sent, [Sent::Endpoint(1, ToEndpoint::Notification(_))]);

    // A call of the second server's tool, with a token: its progress comes from that server.
    let mut called = call("c", "mail__send");
    called["params"]["_meta"] = json!({"progressToken": "p"});
    let sent = m.endpoint(EndpointEvent::Message {
        endpoint: 1,
        inbound: msg(called),
    });
    let [Sent::Call(flight)] = &sent[..] else {
        panic!("checked: {sent:?}")
    };
    assert_eq!(m.call_target(flight).map(|(server, _)| server), Some(1));
    assert!(
        m.server_at(0, progress("p")).is_empty(),
        "the first server was not asked"
    );
    assert!(to_endpoint(&m.server_at(1, progress("p"))));

    // A prompt of the second server (by its prefix), with a token: the same.
    let asked = json!({"jsonrpc": "2.0", "id": 7, "method": "prompts/get",
                       "params": {"name": "mail__greet", "_meta": {"progressToken": "q"}}});
    let sent = m.endpoint(EndpointEvent::Message {
        endpoint: 1,
        inbound: msg(asked),
    });
    assert!(matches!(&sent[..], [Sent::Upstream(1, _)]), "{sent:?}");
    assert!(m.server_at(0, progress("q")).is_empty());
    assert!(to_endpoint(&m.server_at(1, progress("q"))));
}

#[test]
fn a_prompt_name_another_servers_prompt_already_shows_is_left_out() {
    // Server files (never) lists a prompt literally named "mail__hello"; server mail
    // (prefix) lists "hello", which it would show as "mail__hello" too.
    let mut m = Machine::with_servers(
        routed_tools_named(Naming::Never, Naming::Prefix),
        RelayConfig::default(),
        &["files", "mail"],
    );
    let page = |m: &mut Machine, server: usize, id: &str, prompt: &str| -> Value {
        let asked = json!({"jsonrpc": "2.0", "id": id, "method": "prompts/list"});
        let cursor = if server == 0 {
            None
        } else {
            Some(format!("{server}."))
        };
        let asked = match cursor {
            Some(c) => {
                let mut a = asked;
                a["params"] = json!({"cursor": c});
                a
            }
            None => asked,
        };
        let (up, _) = split(m.client(msg(asked)));
        let [(to, relayed)] = &up[..] else {
            panic!("{up:?}")
        };
        assert_eq!(*to, server);
        let answer =
            json!({"jsonrpc": "2.0", "id": relayed["id"], "result": {"prompts": [{"name": prompt}]}});
        let (_, client) = split(m.server_at(server, msg(answer)));
        client[0].clone()
    };
    let first = page(&mut m, 0, "p1", "mail__hello");
    assert_eq!(first["result"]["prompts"][0]["name"], "mail__hello", "{first}");
    let second = page(&mut m, 1, "p2", "hello");
    assert_eq!(second["result"]["prompts"], json!([]), "left out: {second}");
    // The name stays the first server's prompt.
    let get =
        json!({"jsonrpc": "2.0", "id": "g", "method": "prompts/get", "params": {"name": "mail__hello"}});
    let (up, _) = split(m.client(msg(get)));
    assert_eq!(up[0].0, 0, "{up:?}");
    assert_eq!(up[0].1["params"]["name"], "mail__hello");
}

#[test]
fn a_list_no_server_offers_is_empty_and_a_cursor_for_a_server_that_offers_none_is_refused() {
    let mut m = routed();
    // The handshake says only the second server has prompts.
    let hello = json!({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let (up, _) = split(m.client(msg(hello)));
    for (server, asked) in up {
        let capabilities = match server {
            0 => json!({"tools": {}}),
            _ => json!({"tools": {}, "prompts": {}}),
        };
        let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"protocolVersion": "2025-11-25",
            "capabilities": capabilities, "serverInfo": {"name": "s", "version": "1"}}});
        m.server_at(server, msg(answer));
    }
    let forged = json!({"jsonrpc": "2.0", "id": "f", "method": "prompts/list", "params": {"cursor": "0."}});
    let (up, client) = split(m.client(msg(forged)));
    assert!(up.is_empty(), "{up:?}");
    assert_eq!(client[0]["error"]["code"], -32602, "{client:?}");
    // A prompt request naming none goes to the server that has prompts.
    let get = json!({"jsonrpc": "2.0", "id": "g", "method": "prompts/get", "params": {"name": "x"}});
    let (up, _) = split(m.client(msg(get)));
    assert_eq!(up[0].0, 1, "{up:?}");
    // Once it is gone, the list is empty rather than an error.
    m.server_gone(1, "it exited");
    let list = json!({"jsonrpc": "2.0", "id": "l", "method": "prompts/list"});
    let (up, client) = split(m.client(msg(list)));
    assert!(up.is_empty(), "{up:?}");
    let answer = client.iter().find(|c| c["id"] == "l").unwrap();
    assert_eq!(answer["result"], json!({"prompts": []}), "{client:?}");
}
