//! A session core in front of several servers (ADR 033, step 2): what each server is sent,
//! and what it answers, stays that server's; one that goes takes only its own requests.

use super::*;

/// Two servers behind one standing client connection; server requests are relayed.
fn two_servers() -> Machine {
    let config = RelayConfig::default().with_sampling(ServerRequestPolicy::Relay);
    Machine::with_servers(tools().0, config, &["files", "mail"])
}

/// What went to the servers, each message with its server; and what went to the client.
pub(super) fn split(sent: Vec<Sent>) -> (Vec<(usize, Value)>, Vec<Value>) {
    let (mut up, mut client) = (Vec::new(), Vec::new());
    for next in sent {
        match next {
            Sent::Upstream(server, b) => up.push((server, serde_json::from_slice(&b).unwrap())),
            Sent::Client(b) => client.push(serde_json::from_slice(&b).unwrap()),
            other => panic!("unexpected: {other:?}"),
        }
    }
    (up, client)
}

fn from_server(m: &mut Machine, server: usize, message: Value) -> (Vec<(usize, Value)>, Vec<Value>) {
    split(m.server_at(server, msg(message)))
}

#[test]
fn a_calls_request_goes_to_its_server_and_only_that_servers_answer_reaches_the_call() {
    let mut m = two_servers();
    let flight = checked_call(&mut m, "c");
    let (id, sent) = m.call_sends_to(1, &flight, call_request);
    let (up, _) = split(sent);
    assert_eq!(up.len(), 1);
    assert_eq!(up[0].0, 1, "sent to server 1 only");
    // The other server answering the same id answers nothing of ours.
    let stray = from_server(&mut m, 0, json!({"jsonrpc": "2.0", "id": id, "result": {}}));
    assert_eq!(stray, (vec![], vec![]));
    assert_eq!(
        m.call_answer(id),
        None,
        "server 0 cannot answer server 1's request"
    );
    from_server(
        &mut m,
        1,
        json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}}),
    );
    assert_eq!(m.call_answer(id), Some(Ok(())));
}

#[test]
fn a_server_that_goes_takes_only_its_own_requests() {
    let mut m = two_servers();
    let up = m.relayed(json!("r"), "resources/list");
    let flight = checked_call(&mut m, "c");
    let (id, _) = m.call_sends_to(1, &flight, call_request);
    let gone = by(m.server_gone(1, "it exited"));
    assert!(
        gone.client.is_empty() && gone.upstream.is_empty(),
        "server 0's request stands"
    );
    let refused = m.call_answer(id).expect("its call ends at once").unwrap_err();
    assert!(refused.contains("it exited"), "{refused}");
    // Server 0 still answers its request, and still takes calls; server 1 takes none.
    let answered = from_server(
        &mut m,
        0,
        json!({"jsonrpc": "2.0", "id": up["id"], "result": {"resources": []}}),
    );
    assert_eq!(answered.1[0]["id"], "r");
    m.call_ended(&flight);
    let flight = checked_call(&mut m, "d");
    let (id, sent) = m.call_sends_to(1, &flight, call_request);
    assert!(sent.is_empty());
    let unsent = m.call_answer(id).unwrap().unwrap_err();
    assert!(unsent.contains("the request was not sent"), "{unsent}");
    let (id, sent) = m.call_sends_to(0, &flight, call_request);
    assert_eq!(split(sent).0[0].0, 0);
    assert_eq!(m.call_answer(id), None, "waiting for server 0");
}

#[test]
fn two_servers_requests_under_one_id_reach_the_client_apart_and_each_answer_goes_home() {
    let mut m = two_servers();
    let ask = json!({"jsonrpc": "2.0", "id": 0, "method": "sampling/createMessage", "params": {}});
    let (_, to_client_a) = from_server(&mut m, 0, ask.clone());
    let (_, to_client_b) = from_server(&mut m, 1, ask);
    let (a, b) = (to_client_a[0]["id"].clone(), to_client_b[0]["id"].clone());
    assert_ne!(a, b, "the client must be able to tell them apart");
    // Answered in the other order: each goes to its own server, under the server's id 0.
    let (up, _) = split(m.client(msg(json!({"jsonrpc": "2.0", "id": b, "result": {"role": "b"}}))));
    assert_eq!(
        up,
        [(1, json!({"jsonrpc": "2.0", "id": 0, "result": {"role": "b"}}))]
    );
    let (up, _) = split(m.client(msg(json!({"jsonrpc": "2.0", "id": a, "result": {"role": "a"}}))));
    assert_eq!(
        up,
        [(0, json!({"jsonrpc": "2.0", "id": 0, "result": {"role": "a"}}))]
    );
    // Each is answered once: a second answer reaches no server.
    let again = split(m.client(msg(json!({"jsonrpc": "2.0", "id": a, "result": {}}))));
    assert_eq!(again, (vec![], vec![]));
}

#[test]
fn a_servers_cancellation_of_its_request_reaches_the_client_under_the_id_it_saw() {
    let mut m = two_servers();
    let ask = json!({"jsonrpc": "2.0", "id": 7, "method": "sampling/createMessage", "params": {}});
    let (_, seen) = from_server(&mut m, 1, ask);
    let seen_as = seen[0]["id"].clone();
    let cancel = |id: Value| json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}});
    // Server 0 never asked under 7: its cancellation names nothing the client owes it.
    assert_eq!(from_server(&mut m, 0, cancel(json!(7))), (vec![], vec![]));
    let (_, note) = from_server(&mut m, 1, cancel(json!(7)));
    assert_eq!(note, [cancel(seen_as.clone())]);
    let late = split(m.client(msg(json!({"jsonrpc": "2.0", "id": seen_as, "result": {}}))));
    assert_eq!(late, (vec![], vec![]), "the cancelled request takes no answer");
}

#[test]
fn with_one_server_its_requests_reach_the_client_under_its_own_ids() {
    let config = RelayConfig::default().with_sampling(ServerRequestPolicy::Relay);
    let (mut m, _) = machine(config);
    let ask = json!({"jsonrpc": "2.0", "id": "s-1", "method": "sampling/createMessage", "params": {}});
    assert_eq!(m.server_says(ask.clone()).client, [ask]);
}

#[test]
fn a_clients_notification_reaches_every_server_still_there() {
    let mut m = two_servers();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (up, _) = split(m.client(msg(note.clone())));
    assert_eq!(up, [(0, note.clone()), (1, note.clone())]);
    m.server_gone(0, "it exited");
    let (up, _) = split(m.client(msg(note.clone())));
    assert_eq!(up, [(1, note)]);
}

#[test]
fn time_limits_and_the_end_cancel_each_request_at_its_own_server() {
    let mut m = two_servers();
    let flight = checked_call(&mut m, "c");
    let (late, _) = m.call_sends_to(1, &flight, call_request);
    let (up, _) = split(m.call_timed_out_at(1, late));
    assert_eq!(up.len(), 1);
    assert_eq!((up[0].0, &up[0].1["params"]["requestId"]), (1, &json!(late)));
    // The same id timed out at the other server names nothing sent there.
    assert!(m.call_timed_out_at(0, late).is_empty());
    let relayed = m.relayed(json!("r"), "resources/list");
    let flight = checked_call(&mut m, "d");
    let (open, _) = m.call_sends_to(1, &flight, call_request);
    let (mut up, _) = split(m.end());
    up.sort_by_key(|(server, _)| *server);
    let told: Vec<(usize, Value)> = up
        .into_iter()
        .map(|(server, note)| (server, note["params"]["requestId"].clone()))
        .collect();
    assert_eq!(told, [(0, relayed["id"].clone()), (1, json!(open))]);
}

#[test]
fn progress_under_a_token_reaches_the_client_only_from_the_server_its_request_went_to() {
    let mut m = two_servers();
    m.open(1, true);
    let ask = json!({"jsonrpc": "2.0", "id": 5, "method": "prompts/get", "params": {"_meta": {"progressToken": "t"}}});
    let inbound = msg(ask);
    let sent = m.endpoint(crate::relay::EndpointEvent::Message { endpoint: 1, inbound });
    assert!(matches!(&sent[..], [Sent::Upstream(0, _)]), "{sent:?}");
    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": 1}});
    assert!(
        m.server_at(1, msg(progress.clone())).is_empty(),
        "server 1 was never asked"
    );
    let sent = m.server_at(0, msg(progress));
    assert!(
        matches!(&sent[..], [Sent::Endpoint(1, ToEndpoint::Notification(_))]),
        "{sent:?}"
    );
}

/// The client's `initialize` under id `"i"`, and each server's part of it: (server, id).
fn initialize(m: &mut Machine) -> Vec<(usize, Value)> {
    let hello = json!({"jsonrpc": "2.0", "id": "i", "method": "initialize",
                       "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}});
    let (up, client) = split(m.client(msg(hello)));
    assert!(client.is_empty(), "no answer before the servers'");
    assert_eq!(
        up.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        [0, 1],
        "each server hears it"
    );
    assert_ne!(up[0].1["id"], up[1].1["id"], "under ids of the relay's");
    up.into_iter().map(|(s, part)| (s, part["id"].clone())).collect()
}

fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

#[test]
fn the_handshake_is_answered_once_every_server_has_with_what_they_offer_together() {
    let mut m = two_servers();
    let parts = initialize(&mut m);
    let files = json!({"protocolVersion": "2025-06-18", "serverInfo": {"name": "fs", "version": "1"},
                       "capabilities": {"tools": {"listChanged": false}, "logging": {}},
                       "instructions": "Read files."});
    let mail = json!({"protocolVersion": "2025-03-26", "serverInfo": {"name": "mail", "version": "2"},
                      "capabilities": {"tools": {}, "prompts": {"listChanged": true},
                                       "tasks": {"requests": {"tools": {"call": {}}}}},
                      "instructions": "Send mail."});
    assert_eq!(
        from_server(&mut m, 1, result(&parts[1].1, mail)),
        (vec![], vec![]),
        "one of two"
    );
    let (up, client) = from_server(&mut m, 0, result(&parts[0].1, files));
    assert!(up.is_empty());
    let [answer] = &client[..] else {
        panic!("one answer: {client:?}")
    };
    assert_eq!(answer["id"], "i");
    let merged = &answer["result"];
    assert_eq!(
        merged["protocolVersion"], "2025-03-26",
        "the oldest a server answered"
    );
    assert_eq!(
        merged["capabilities"]["tools"]["listChanged"], true,
        "tools change as servers go"
    );
    assert_eq!(merged["capabilities"]["prompts"]["listChanged"], true);
    assert_eq!(merged["capabilities"]["logging"], json!({}));
    assert_eq!(
        merged["capabilities"]["tasks"]["requests"]["tools"],
        json!({}),
        "no task-augmented calls"
    );
    assert_eq!(merged["instructions"], "[files] Read files.\n\n[mail] Send mail.");
    assert_eq!(merged["serverInfo"]["name"], &*RelayConfig::default().product);
    assert_eq!(m.in_flight(), 0);
    assert!(m.idle_upstream());
}

#[test]
fn a_server_that_fails_the_handshake_is_gone_and_the_others_serve() {
    let mut m = two_servers();
    let parts = initialize(&mut m);
    let refused = json!({"jsonrpc": "2.0", "id": parts[0].1, "error": {"code": -32602, "message": "unsupported version"}});
    from_server(&mut m, 0, refused);
    let ok = json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}});
    let (_, client) = from_server(&mut m, 1, result(&parts[1].1, ok));
    assert_eq!(client[0]["result"]["protocolVersion"], "2025-06-18");
    assert!(m.fatal().is_none(), "the session goes on");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        split(m.client(msg(note.clone()))).0,
        [(1, note)],
        "only the server still there"
    );
    // Until calls are routed by name (step 4) every call is the first server's: refused.
    let call = json!({"jsonrpc": "2.0", "id": "c", "method": "tools/call",
                      "params": {"name": "send", "arguments": {"to": "team"}}});
    let (up, client) = split(m.client(msg(call)));
    assert!(up.is_empty());
    assert!(
        client[0].to_string().contains("unsupported version"),
        "{}",
        client[0]
    );
    let (id, sent) = m.call_sends_to(0, "c", call_request);
    assert!(sent.is_empty());
    assert!(m
        .call_answer(id)
        .unwrap()
        .unwrap_err()
        .contains("unsupported version"));
}

#[test]
fn a_server_silent_past_the_handshake_limit_is_told_and_left_out() {
    let limit = Duration::from_secs(5);
    let config = RelayConfig::default().with_handshake_timeout(limit);
    let mut m = Machine::with_servers(tools().0, config, &["files", "mail"]);
    let parts = initialize(&mut m);
    let ok = json!({"protocolVersion": "2025-06-18", "capabilities": {}});
    from_server(&mut m, 1, result(&parts[1].1, ok));
    let (up, client) = split(m.after(limit));
    assert_eq!(up.len(), 1);
    assert_eq!((up[0].0, &up[0].1["params"]["requestId"]), (0, &parts[0].1));
    assert_eq!(client[0]["id"], "i");
    assert!(
        client[0]["result"].is_object(),
        "answered with the server that answered"
    );
}

#[test]
fn a_cancelled_handshake_reaches_every_server_and_is_not_answered() {
    let mut m = two_servers();
    let parts = initialize(&mut m);
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "i"}});
    let (up, client) = split(m.client(msg(cancel)));
    assert!(client.is_empty());
    let told: Vec<(usize, Value)> = up
        .into_iter()
        .map(|(s, n)| (s, n["params"]["requestId"].clone()))
        .collect();
    assert_eq!(told, parts);
    for (server, id) in &parts {
        let late = from_server(&mut m, *server, result(id, json!({"capabilities": {}})));
        assert_eq!(late, (vec![], vec![]), "a late answer is dropped");
    }
    assert!(m.in_flight() == 0 && m.idle_upstream());
}

#[test]
fn when_no_server_completes_the_handshake_the_client_is_told_why_and_the_session_ends() {
    let mut m = two_servers();
    let parts = initialize(&mut m);
    m.server_gone(1, "it exited");
    let garbage = format!("{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":", parts[0].1);
    let (_, client) = split(m.server(Inbound::Message(Bytes::from(garbage))));
    let message = client[0]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("files:") && message.contains("mail: it exited"),
        "{message}"
    );
    assert!(m.fatal().is_some());
}

#[test]
fn a_client_that_has_the_tool_list_is_told_it_changed_when_a_server_goes() {
    let mut m = two_servers();
    assert!(
        by(m.server_gone(1, "it exited")).client.is_empty(),
        "nothing listed, no news"
    );
    let up = m.relayed(json!("l"), "tools/list");
    m.server_says(json!({"jsonrpc": "2.0", "id": up["id"], "result": {"tools": []}}));
    let sent = by(m.server_gone(0, "it exited"));
    assert_eq!(
        sent.client,
        [json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})]
    );
}

#[test]
fn with_the_first_server_gone_requests_that_name_none_go_to_the_next_one() {
    let mut m = two_servers();
    m.server_gone(0, "it exited");
    for method in ["ping", "tools/list"] {
        let request = json!({"jsonrpc": "2.0", "id": method, "method": method});
        let (up, client) = split(m.client(msg(request)));
        assert!(client.is_empty(), "{method}: {client:?}");
        assert_eq!(up[0].0, 1, "{method}");
    }
}

#[test]
fn a_list_walks_only_the_servers_whose_handshake_offered_it() {
    let mut m = two_servers();
    let parts = initialize(&mut m);
    let offers = |capabilities: Value| json!({"protocolVersion": "2025-06-18", "capabilities": capabilities});
    from_server(&mut m, 0, result(&parts[0].1, offers(json!({"tools": {}}))));
    from_server(
        &mut m,
        1,
        result(&parts[1].1, offers(json!({"tools": {}, "prompts": {}}))),
    );
    let (up, _) = split(m.client(msg(
        json!({"jsonrpc": "2.0", "id": "p", "method": "prompts/list"}),
    )));
    assert_eq!(up[0].0, 1, "server 0 offers no prompts");
    let (up, _) = split(m.client(msg(
        json!({"jsonrpc": "2.0", "id": "r", "method": "resources/list"}),
    )));
    assert!(up.is_empty(), "no server offers resources");
    let (up, _) = split(m.client(msg(json!({"jsonrpc": "2.0", "id": "t", "method": "tools/list"}))));
    assert_eq!(up[0].0, 0);
    let (_, client) = from_server(
        &mut m,
        0,
        json!({"jsonrpc": "2.0", "id": up[0].1["id"], "result": {"tools": []}}),
    );
    assert_eq!(client[0]["result"]["nextCursor"], "1.", "server 1 offers tools");
}

#[test]
fn a_server_that_answers_a_protocol_version_nobody_asked_for_is_left_out() {
    let mut m = two_servers();
    let parts = initialize(&mut m);
    let answer = |version: &str| json!({"protocolVersion": version, "capabilities": {}});
    from_server(&mut m, 0, result(&parts[0].1, answer("1999-01-01")));
    let (_, client) = from_server(&mut m, 1, result(&parts[1].1, answer("2025-03-26")));
    assert_eq!(
        client[0]["result"]["protocolVersion"], "2025-03-26",
        "a known older version is fine"
    );
    let (id, sent) = m.call_sends_to(0, "c", call_request);
    assert!(sent.is_empty());
    let refused = m.call_answer(id).unwrap().unwrap_err();
    assert!(refused.contains("1999-01-01"), "{refused}");
}
