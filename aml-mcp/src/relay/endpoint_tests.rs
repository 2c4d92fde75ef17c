//! A session whose client side is endpoints (ADR 031): one id map for every endpoint, answers
//! and notifications to the endpoint they belong to, an endpoint that closes cancels what it
//! asked.

use super::*;
use crate::relay::EndpointEvent;

fn stateless() -> Machine {
    Machine::of_endpoints(tools().0, RelayConfig::default())
}

fn from(m: &mut Machine, endpoint: u64, message: Value) -> By {
    by(m.endpoint(EndpointEvent::Message {
        endpoint,
        inbound: msg(message),
    }))
}

fn with_token(id: Value, method: &str, token: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"_meta": {"progressToken": token}}})
}

#[test]
fn two_endpoints_with_the_same_id_and_token_never_meet() {
    let mut m = stateless();
    m.open(1, true);
    m.open(2, false);
    let ups: Vec<Value> = [1, 2]
        .into_iter()
        .map(|endpoint| {
            let sent = from(&mut m, endpoint, with_token(json!(5), "prompts/get", json!("t")));
            assert!(sent.endpoints.is_empty(), "not refused as an id in flight");
            sent.upstream[0].clone()
        })
        .collect();
    assert_ne!(ups[0]["id"], ups[1]["id"]);
    let tokens: Vec<&Value> = ups
        .iter()
        .map(|up| &up["params"]["_meta"]["progressToken"])
        .collect();
    assert_ne!(tokens[0], tokens[1]);
    assert_ne!(tokens[0], &json!("t"), "the relay's own token goes up");
    assert_eq!(m.in_flight(), 2);

    // Progress reaches the streaming endpoint with its own token; the JSON one gets none.
    for token in &tokens {
        let note = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                          "params": {"progressToken": token, "progress": 1}});
        let sent = m.server_says(note);
        assert!(sent.client.is_empty() && sent.nowhere.is_empty());
        if *token == tokens[0] {
            let [(1, false, note)] = &sent.endpoints[..] else {
                panic!("progress for endpoint 1: {:?}", sent.endpoints)
            };
            assert_eq!(note["params"]["progressToken"], "t");
        } else {
            assert!(sent.endpoints.is_empty(), "{:?}", sent.endpoints);
        }
    }
    // Each answer goes to its endpoint with the client's id back.
    for (endpoint, up) in [(2, &ups[1]), (1, &ups[0])] {
        let sent = m.server_says(json!({"jsonrpc": "2.0", "id": up["id"], "result": {"n": endpoint}}));
        assert_eq!(
            sent.endpoints,
            [(
                endpoint,
                true,
                json!({"jsonrpc": "2.0", "id": 5, "result": {"n": endpoint}})
            )]
        );
    }
    assert_eq!(m.in_flight(), 0);
}

#[test]
fn an_endpoint_that_closes_before_its_answer_cancels_its_request_upstream() {
    let mut m = stateless();
    m.open(3, true);
    let asked = with_token(json!("x"), "resources/read", json!(1));
    let up = from(&mut m, 3, asked.clone()).upstream[0].clone();
    assert_eq!(m.mapped_tokens(), 1);
    // A message from an endpoint never opened (a request without an id, as the front sends
    // one) keeps no token: nothing would ever forget it.
    let mut idless = asked.clone();
    idless.as_object_mut().unwrap().remove("id");
    from(&mut m, 9, idless);
    assert_eq!(m.mapped_tokens(), 1);
    // A token MCP does not allow (not a string or a number; any number goes up as one of the
    // relay's tokens) is refused, and nothing goes up (servers drop such a request
    // unanswered); a gated call's refusal is recorded as malformed.
    m.open(5, true);
    for odd in [json!({"a": 1}), json!(null), json!(true), json!([1])] {
        for method in ["resources/read", "tools/call"] {
            let asked = with_token(json!(odd.to_string()), method, odd.clone());
            let sent = from(&mut m, 5, asked);
            assert!(sent.upstream.is_empty(), "{odd} went up: {:?}", sent.upstream);
            let [(5, true, refused)] = &sent.endpoints[..] else {
                panic!("one answer for {odd}: {:?}", sent.endpoints)
            };
            assert_eq!(refused["id"], json!(odd.to_string()));
            let text = refused.to_string();
            assert!(
                text.contains("progressToken must be a string or an integer"),
                "{text}"
            );
            if method == "tools/call" {
                assert!(text.contains("malformed_request"), "{text}");
            } else {
                assert_eq!(refused["error"]["code"], jsonrpc::INVALID_PARAMS);
            }
        }
    }
    assert_eq!(m.mapped_tokens(), 1);
    assert_eq!(m.in_flight(), 1);
    m.endpoint(EndpointEvent::Close { endpoint: 5 });
    let closed = by(m.endpoint(EndpointEvent::Close { endpoint: 3 }));
    let [cancel] = &closed.upstream[..] else {
        panic!("one cancellation: {:?}", closed.upstream)
    };
    assert_eq!(cancel["method"], "notifications/cancelled");
    assert_eq!(cancel["params"]["requestId"], up["id"]);
    assert_eq!(m.in_flight(), 0);
    assert_eq!(m.mapped_tokens(), 0, "the close forgot the endpoint's tokens");
    let late = m.server_says(json!({"jsonrpc": "2.0", "id": up["id"], "result": {}}));
    assert!(late.endpoints.is_empty() && late.client.is_empty() && late.nowhere.is_empty());
    // An endpoint closed after its answer cancels nothing.
    m.open(4, false);
    let up = from(&mut m, 4, request(json!(1), "resources/read")).upstream[0].clone();
    m.server_says(json!({"jsonrpc": "2.0", "id": up["id"], "result": {}}));
    assert!(by(m.endpoint(EndpointEvent::Close { endpoint: 4 }))
        .upstream
        .is_empty());
}

#[test]
fn a_subscription_notifies_its_own_endpoint_and_what_belongs_to_none_goes_nowhere() {
    let mut m = stateless();
    m.open(7, true);
    m.open(8, true);
    let up = from(&mut m, 7, request(json!("sub"), "subscriptions/listen")).upstream[0].clone();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                      "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": up["id"]}}});
    let sent = m.server_says(note);
    let [(7, false, note)] = &sent.endpoints[..] else {
        panic!("the subscription's endpoint: {:?}", sent.endpoints)
    };
    assert_eq!(
        note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "sub"
    );
    // No standing connection: a notification tied to no request is dropped, and a server's
    // request is answered at once, to the server.
    let loose = m.server_says(json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}));
    assert!(loose.endpoints.is_empty() && loose.nowhere.len() == 1);
    let asked = m.server_says(json!({"jsonrpc": "2.0", "id": "srv-1", "method": "roots/list"}));
    assert!(asked.endpoints.is_empty() && asked.nowhere.is_empty());
    assert_eq!(asked.upstream[0]["id"], "srv-1");
    assert_eq!(asked.upstream[0]["error"]["code"], -32601);
    // One the host refuses by its setting is refused without naming a setting that would not
    // help here.
    let sampling = json!({"jsonrpc": "2.0", "id": "srv-2", "method": "sampling/createMessage", "params": {}});
    let refused = m.server_says(sampling);
    let why = refused.upstream[0]["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(refused.upstream[0]["error"]["code"], jsonrpc::REFUSED_BY_HOST);
    assert!(
        why.contains("no client here could answer it") && !why.contains("`relay`"),
        "{why}"
    );
}

#[test]
fn a_gated_call_is_kept_by_its_endpoint_and_a_bad_message_answered_there() {
    let mut m = stateless();
    m.open(1, false);
    m.open(2, false);
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                      "params": {"name": "send", "arguments": {"to": "team"}}});
    let first = from(&mut m, 1, call.clone());
    let second = from(&mut m, 2, call);
    assert_eq!((first.calls.len(), second.calls.len()), (1, 1));
    assert_ne!(first.calls, second.calls, "one flight per endpoint");
    let bad = by(m.endpoint(EndpointEvent::Message {
        endpoint: 2,
        inbound: Inbound::Message(Bytes::from_static(b"{\"id\":3,")),
    }));
    let [(2, true, answer)] = &bad.endpoints[..] else {
        panic!("the parse error to endpoint 2: {:?}", bad.endpoints)
    };
    assert_eq!(answer["error"]["code"], jsonrpc::PARSE_ERROR);
}

fn msg_raw(text: &'static str) -> Inbound {
    Inbound::Message(Bytes::from_static(text.as_bytes()))
}

fn session() -> Machine {
    Machine::of_session(tools().0, RelayConfig::default())
}

/// One client's endpoints (a Streamable HTTP session, ADR 032): its ids are one space, its
/// progress tokens go up as it chose them, and a closed endpoint cancels nothing.
#[test]
fn one_clients_endpoints_share_its_ids_and_keep_its_tokens() {
    let mut m = session();
    m.open(1, true);
    m.open(2, true);
    let up = from(&mut m, 1, with_token(json!(5), "prompts/get", json!("t"))).upstream[0].clone();
    assert_eq!(
        up["params"]["_meta"]["progressToken"], "t",
        "the client's own token"
    );
    let twice = from(&mut m, 2, request(json!(5), "prompts/get"));
    let [(2, true, refused)] = &twice.endpoints[..] else {
        panic!(
            "the same id on another endpoint is refused there: {:?}",
            twice.endpoints
        )
    };
    assert_eq!(refused["error"]["code"], jsonrpc::INVALID_REQUEST);
    assert!(twice.upstream.is_empty());
    let note = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": "t", "progress": 1}});
    let sent = m.server_says(note.clone());
    assert_eq!(sent.endpoints, [(1, false, note.clone())]);
    // A cancellation may come on any endpoint (or the standing one): the id is the client's.
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}});
    let cancelled = by(m.client(msg(cancel)));
    assert_eq!(cancelled.upstream[0]["params"]["requestId"], up["id"]);
    assert_eq!(m.in_flight(), 0);

    // An endpoint closed before its answer cancels nothing: the client may still be told.
    let up = from(&mut m, 2, request(json!(6), "resources/read")).upstream[0].clone();
    assert!(by(m.endpoint(EndpointEvent::Close { endpoint: 2 }))
        .upstream
        .is_empty());
    assert_eq!(m.in_flight(), 1);
    let late = m.server_says(json!({"jsonrpc": "2.0", "id": up["id"], "result": {}}));
    assert!(
        late.endpoints.is_empty() && late.client.is_empty(),
        "nobody waits on it"
    );
    assert_eq!(m.in_flight(), 0);

    // A token is noted however it is spelled, and its progress goes on as the server wrote it.
    let escaped =
        r#"{"jsonrpc":"2.0","id":7,"method":"prompts/get","params":{"_meta":{"progressToken":"\u0074x"}}}"#;
    let inbound = msg_raw(escaped);
    m.endpoint(EndpointEvent::Message { endpoint: 1, inbound });
    let note = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t\u0078"}}"#;
    let sent = m.server(msg_raw(note));
    assert_eq!(
        sent,
        [Sent::Endpoint(1, ToEndpoint::Notification(Bytes::from(note)))]
    );

    // Its tokens go up as it wrote them, so a number must be an integer a double keeps
    // (servers drop other tokens unanswered); `1e3` and `-0.0` are such integers.
    for (id, token, kept) in [
        (8, "1.5", false),
        (9, "9007199254740992", false),
        (10, "-12345678901234567890123", false),
        (11, "9007199254740991", true),
        (12, "1e3", true),
        (13, "-0.0", true),
    ] {
        let asked = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","params":{{"_meta":{{"progressToken":{token}}}}}}}"#
        );
        let inbound = Inbound::Message(Bytes::from(asked));
        let sent = by(m.endpoint(EndpointEvent::Message { endpoint: 1, inbound }));
        assert_eq!(
            sent.upstream.len(),
            usize::from(kept),
            "{token}: {:?}",
            sent.upstream
        );
        if !kept {
            let [(1, true, refused)] = &sent.endpoints[..] else {
                panic!("{token} is refused: {:?}", sent.endpoints)
            };
            assert_eq!(refused["error"]["code"], jsonrpc::INVALID_PARAMS, "{token}");
        }
    }
}

/// What is tied to no request goes to the client's newest open stream, else its standing
/// one; progress for a request whose endpoint takes no notifications goes nowhere.
#[test]
fn one_client_reads_what_belongs_to_no_request_on_its_newest_stream() {
    let mut m = session();
    let loose = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {}});
    let to_standing = m.server_says(loose.clone()).client;
    assert_eq!(
        to_standing,
        std::slice::from_ref(&loose),
        "no stream: the standing one"
    );
    m.open(3, true);
    m.open(4, false);
    m.open(5, true);
    assert_eq!(
        m.server_says(loose.clone()).endpoints,
        [(5, false, loose.clone())]
    );
    let asked = json!({"jsonrpc": "2.0", "id": "srv-1", "method": "roots/list"});
    let sent = m.server_says(asked.clone());
    assert_eq!(
        sent.endpoints,
        [(5, false, asked)],
        "a server's request, as a message"
    );
    // Progress for a request answered as JSON has no stream of its own: not another's either.
    from(&mut m, 4, with_token(json!(1), "prompts/get", json!(77)));
    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                          "params": {"progressToken": 77, "progress": 1}});
    let sent = m.server_says(progress);
    assert!(
        sent.endpoints.is_empty() && sent.client.is_empty(),
        "{:?}",
        sent.endpoints
    );
    m.endpoint(EndpointEvent::Close { endpoint: 5 });
    assert_eq!(m.server_says(loose.clone()).endpoints, [(3, false, loose)]);
}
