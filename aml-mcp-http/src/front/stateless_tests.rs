use super::*;
use bytes::Bytes;
use std::time::Duration;

fn peer() -> SocketAddr {
    "127.0.0.1:1".parse().unwrap()
}

fn request(id: u64) -> Inbound {
    Inbound::Message(Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#
    )))
}

fn events(client: Client) -> mpsc::Receiver<EndpointEvent> {
    match client {
        Client::Endpoints(events) => events,
        _ => panic!("a stateless link's relay has callers' endpoints"),
    }
}

/// The link of requests without a token (a new one), and its relay's end.
fn anyones_link(home: &Arc<Stateless>) -> (Arc<Link>, mpsc::Receiver<EndpointEvent>) {
    let (link, Some((relay, _))) = home.link(peer(), &None, 64).unwrap() else {
        panic!("a new link")
    };
    (link, events(relay))
}

/// One link per caller, at most `max`: at the cap the idlest link gives way to a new
/// caller's (its relay sees its client leave); with every link busy, a new caller is
/// refused, and a known caller still gets its own link.
#[tokio::test]
async fn callers_get_links_of_their_own_up_to_the_cap() {
    let home = Arc::new(Stateless::default());
    let who = |name: &str| Some(name.to_owned());
    let (alice, Some((alice_relay, info))) = home.link(peer(), &who("alice"), 2).unwrap() else {
        panic!("a new link for alice")
    };
    let _alice_relay = events(alice_relay);
    assert_eq!(info.caller.as_deref(), Some("alice"));
    let (bob, Some((bob_relay, _))) = home.link(peer(), &who("bob"), 2).unwrap() else {
        panic!("a new link for bob")
    };
    let mut bob_relay = events(bob_relay);
    assert!(!Arc::ptr_eq(&alice, &bob), "each caller its own relay");
    // Alice has a request waiting; bob is idle: carol's link replaces bob's.
    let _waiting = alice.ask(request(1), false, 4).await.ok().unwrap();
    let (carol, Some((carol_relay, _))) = home.link(peer(), &who("carol"), 2).unwrap() else {
        panic!("a new link for carol")
    };
    let _carol_relay = events(carol_relay);
    assert!(
        bob_relay.recv().await.is_none(),
        "bob's relay saw its client leave"
    );
    assert!(matches!(
        bob.ask(request(2), false, 4).await,
        Err(Refused::Closed)
    ));
    // Alice and carol both busy: dave is refused, alice keeps hers.
    let _also = carol.ask(request(3), false, 4).await.ok().unwrap();
    assert!(home.link(peer(), &who("dave"), 2).is_err());
    let (again, None) = home.link(peer(), &who("alice"), 2).unwrap() else {
        panic!("alice's own link")
    };
    assert!(Arc::ptr_eq(&again, &alice));
}

/// Each request opens an endpoint of its own, then goes to the relay on it; at the limit
/// of requests waiting the next is refused; a link whose relay has ended is not handed out
/// again.
#[tokio::test]
async fn each_request_has_an_endpoint_and_an_ended_relay_opens_a_new_link() {
    let home = Arc::new(Stateless::default());
    let (link, mut relay) = anyones_link(&home);
    assert!(home.link(peer(), &None, 64).unwrap().1.is_none(), "the same link");
    let first = link.ask(request(5), true, 2).await.ok().unwrap();
    let _second = link.ask(request(5), false, 2).await.ok().unwrap();
    assert!(matches!(link.ask(request(6), false, 2).await, Err(Refused::Full)));
    let mut opened = Vec::new();
    for _ in 0..4 {
        match relay.recv().await.unwrap() {
            EndpointEvent::Open { endpoint, stream, .. } => opened.push((endpoint, stream)),
            EndpointEvent::Message { endpoint, .. } => {
                assert_eq!(Some(&endpoint), opened.last().map(|(e, _)| e))
            }
            EndpointEvent::Close { .. } => panic!("nothing closed yet"),
        }
    }
    assert_eq!(opened.len(), 2);
    assert_ne!(opened[0].0, opened[1].0, "one endpoint per request");
    assert_eq!((opened[0].1, opened[1].1), (true, false));
    drop(first);
    assert!(matches!(relay.recv().await, Some(EndpointEvent::Close { endpoint }) if endpoint == opened[0].0));
    // The relay ends: the next request opens a new link.
    drop(relay);
    assert!(home.link(peer(), &None, 64).unwrap().1.is_some());
}

/// A relay too busy to take an endpoint's close at once still gets it, after what was
/// queued before it: the server is told the request is cancelled.
#[tokio::test]
async fn a_close_waits_for_room_rather_than_be_lost() {
    let home = Arc::new(Stateless::default());
    let (link, mut relay) = anyones_link(&home);
    let asked = link.ask(request(1), false, 4).await.ok().unwrap();
    let tx = link.sender().unwrap();
    let mut queued = 0;
    while tx.try_send(EndpointEvent::Close { endpoint: 999 }).is_ok() {
        queued += 1;
    }
    drop(asked);
    // Open and message first, then the filler, then the close.
    for _ in 0..2 + queued {
        relay.recv().await.unwrap();
    }
    let next = tokio::time::timeout(Duration::from_secs(5), relay.recv()).await;
    assert!(
        matches!(next, Ok(Some(EndpointEvent::Close { endpoint })) if endpoint != 999),
        "the request's close after the queued events"
    );
}
