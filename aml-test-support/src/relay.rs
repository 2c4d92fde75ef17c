//! A scripted server's stand-in for the relay behind an HTTP front's session (feature
//! `relay`): the session's endpoints as one standing connection.

use std::collections::{BTreeMap, HashMap};

use aml_mcp::relay::jsonrpc::Envelope;
use aml_mcp::relay::{Client, Connection, EndpointEvent, EndpointId, Inbound, Peer, ToEndpoint, STANDING};
use tokio::sync::mpsc;

/// A session's client side ([`Client::Session`]) as one standing connection, for a test's
/// scripted server in the relay's place: what the session's endpoints send comes in as it
/// was sent (ids unchanged); what the server writes goes, as the relay sends it, to the
/// endpoint whose request it answers, else (a notification, a server's request) to the
/// newest open endpoint that streams, else to the standing one. Panics on another client
/// side.
pub fn session_connection(client: Client) -> Connection {
    let Client::Session(mut events) = client else {
        panic!("a session's client side, not {client:?}")
    };
    let (
        connection,
        Peer {
            to_relay,
            mut from_relay,
        },
    ) = Connection::in_memory(64);
    tokio::spawn(async move {
        let mut open: BTreeMap<EndpointId, (mpsc::Sender<ToEndpoint>, bool)> = BTreeMap::new();
        let mut asked: HashMap<String, EndpointId> = HashMap::new();
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(EndpointEvent::Open { endpoint, to, stream }) => drop(open.insert(endpoint, (to, stream))),
                    Some(EndpointEvent::Close { endpoint }) => drop(open.remove(&endpoint)),
                    Some(EndpointEvent::Message { endpoint, inbound }) => {
                        if let Inbound::Message(m) | Inbound::Traced { message: m, .. } = &inbound {
                            if let Some((id, true)) = id_and_method(m) {
                                asked.insert(id, endpoint);
                            }
                        }
                        if to_relay.send(inbound).await.is_err() {
                            return;
                        }
                    }
                    None => return,
                },
                message = from_relay.recv() => {
                    let Some(message) = message else { return };
                    let answered = match id_and_method(&message) {
                        Some((id, false)) => asked.remove(&id),
                        _ => None,
                    };
                    let newest = open.iter().rev().find(|(e, (_, stream))| **e != STANDING && *stream);
                    let (to, message) = match answered {
                        Some(endpoint) => (open.get(&endpoint), ToEndpoint::Answer(message)),
                        None => (newest.map(|(_, o)| o).or(open.get(&STANDING)), ToEndpoint::Notification(message)),
                    };
                    if let Some((to, _)) = to {
                        let _ = to.send(message).await;
                    }
                }
            }
        }
    });
    connection
}

/// A message's id (as sent) and whether it has a method; `None` without an id.
fn id_and_method(message: &[u8]) -> Option<(String, bool)> {
    let envelope = Envelope::parse(message).ok()?;
    Some((envelope.id?.get().to_owned(), envelope.method.is_some()))
}
