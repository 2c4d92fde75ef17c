//! Protocol 2026-07-28 over HTTP: no sessions, one request per POST. All such requests of
//! one caller (one bearer token's name) share one relay connection (a "link", made when the
//! caller's first one comes and again after its relay ends), so a relay's calls are one
//! caller's. The front gives each request its own id (and progress token) before the relay and
//! puts the client's back on the way out, so clients that pick the same id never collide;
//! the answer and the request's progress go to the POST that sent it, anything else from
//! the server has nowhere to go and is dropped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use aml_mcp::relay::{Connection, Inbound, Peer, TransportTrace, UPSTREAM_GONE};
use bytes::Bytes;
use tokio::sync::mpsc;

use super::SessionInfo;
use crate::envelope::{splice, ServerMessage};
use crate::param_headers::ToolHeaders;
use crate::{message, sse};

/// SSE chunks queued for one POST before its progress notifications are dropped.
const STREAM_QUEUE: usize = 64;
/// The front's progress tokens: this prefix and the request's own id.
const TOKEN_PREFIX: &str = "aml-progress-";

/// The stateless path's state, shared by every request handler.
#[derive(Debug, Default)]
pub(crate) struct Stateless {
    /// One link per caller (the token's name; `None` without tokens), so each relay's
    /// calls are one caller's.
    links_by_caller: Mutex<HashMap<Option<String>, Arc<Link>>>,
    next_id: AtomicU64,
    links: AtomicU64,
    /// What each tool declares as `Mcp-Param-*` headers, from the listings the links carry.
    pub(crate) param_headers: ToolHeaders,
}

/// One relay connection for stateless requests.
#[derive(Debug)]
pub(crate) struct Link {
    to_relay: Mutex<Option<mpsc::Sender<Inbound>>>,
    waiting: Mutex<Waiting>,
    home: Weak<Stateless>,
    caller: Option<String>,
}

#[derive(Debug, Default)]
struct Waiting {
    closed: bool,
    by_id: HashMap<u64, Waiter>,
    /// When a request last came: the idlest link gives way to a new caller's at the cap.
    last_used: Option<std::time::Instant>,
}

/// A request waiting for its answer.
#[derive(Debug)]
struct Waiter {
    /// The id the client gave it, as sent.
    client_id: Bytes,
    /// The progress token the client gave it, as sent.
    client_token: Option<Bytes>,
    tx: mpsc::Sender<Bytes>,
    sse: bool,
    /// A `tools/list`: its answer teaches [`Stateless::param_headers`].
    lists_tools: bool,
}

/// Why a request could not be registered.
pub(crate) enum Refused {
    /// The limit of requests waiting at once.
    Full,
    /// The link's relay has ended.
    Closed,
}

/// A registered request: where its answer comes, and what cancels it when dropped early.
pub(crate) struct Registered {
    pub(crate) rx: mpsc::Receiver<Bytes>,
    pub(crate) guard: CancelGuard,
}

/// Dropped before the answer came (the client closed its stream, or went away): the request
/// is cancelled, as closing the stream means in 2026-07-28.
pub(crate) struct CancelGuard {
    link: Arc<Link>,
    id: u64,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.link.lock().by_id.remove(&self.id).is_none() {
            return;
        }
        tracing::debug!(target: "aml_mcp_http", id = self.id, "a stateless client stopped waiting; its request is cancelled");
        let note = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{{\"requestId\":{},\"reason\":\"the client closed its response stream\"}}}}",
            self.id
        );
        let Some(tx) = self.link.sender() else { return };
        match tx.try_send(Inbound::Message(Bytes::from(note))) {
            Err(mpsc::error::TrySendError::Full(note)) => {
                // The relay is behind: the cancellation waits its turn rather than be lost.
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => drop(runtime.spawn(async move { tx.send(note).await })),
                    Err(_) => {
                        tracing::warn!(target: "aml_mcp_http", id = self.id, "a stateless request's cancellation could not be queued; the server is not told")
                    }
                }
            }
            // Sent, or the relay has ended and nothing runs any more.
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

/// A new link's relay connection and what the host learns of it.
pub(crate) type Opened = (Connection, SessionInfo);

/// Every caller's link is busy and there are `max` of them: a new caller's request waits
/// for none of them (503).
#[derive(Debug)]
pub(crate) struct TooManyLinks;

impl Stateless {
    /// The caller's current link, or a new one: then also the connection and info for the
    /// host. Each link has a relay and a server of its own, so at most `max` are open: at the
    /// cap, the link idle longest (no request waiting) is closed for the new caller's, and
    /// when none is idle the request is refused.
    pub(crate) fn link(
        self: &Arc<Self>,
        peer: SocketAddr,
        caller: &Option<String>,
        max: usize,
    ) -> Result<(Arc<Link>, Option<Opened>), TooManyLinks> {
        let mut links = self.links_by_caller.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(link) = links.get(caller).filter(|l| !l.lock().closed) {
            return Ok((link.clone(), None));
        }
        links.retain(|_, link| !link.lock().closed);
        let busy = |peer, open| {
            tracing::warn!(target: "aml_mcp_http", %peer, open, "refused: every caller's 2026-07-28 relay is busy");
            Err(TooManyLinks)
        };
        if max == 0 {
            return busy(peer, links.len());
        }
        while links.len() >= max {
            let idlest = links
                .iter()
                .filter_map(|(who, link)| {
                    let waiting = link.lock();
                    waiting.by_id.is_empty().then(|| (waiting.last_used, who.clone()))
                })
                .min_by_key(|(used, _)| *used)
                .map(|(_, who)| who);
            let Some(who) = idlest else {
                return busy(peer, links.len());
            };
            if let Some(link) = links.remove(&who) {
                tracing::info!(target: "aml_mcp_http", "an idle 2026-07-28 relay is closed for another caller's");
                link.lock().closed = true;
                link.to_relay.lock().unwrap_or_else(|e| e.into_inner()).take();
            }
        }
        let (connection, Peer { to_relay, from_relay }) = Connection::in_memory(1024);
        let link = Arc::new(Link {
            to_relay: Mutex::new(Some(to_relay)),
            waiting: Mutex::new(Waiting::default()),
            home: Arc::downgrade(self),
            caller: caller.clone(),
        });
        links.insert(caller.clone(), link.clone());
        tokio::spawn(link.clone().route(from_relay));
        let number = self.links.fetch_add(1, Ordering::Relaxed) + 1;
        let info = SessionInfo {
            id: format!("stateless-{number}"),
            name: format!("stateless-{number}"),
            peer,
            stateless: true,
            caller: caller.clone(),
        };
        tracing::info!(target: "aml_mcp_http", %peer, link = %info.id, "stateless (2026-07-28) relay connection opened");
        Ok((link, Some((connection, info))))
    }

    /// How many links are open (each has a relay and a server of its own).
    pub(crate) fn open(&self) -> usize {
        let links = self.links_by_caller.lock().unwrap_or_else(|e| e.into_inner());
        links.values().filter(|link| !link.lock().closed).count()
    }

    /// A fresh id for a request.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Ends every link (the front is closing): their relays see the client leave.
    pub(crate) fn close(&self) {
        let links: Vec<_> = self
            .links_by_caller
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, link)| link)
            .collect();
        for link in links {
            link.to_relay.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
    }
}

impl Link {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sender(&self) -> Option<mpsc::Sender<Inbound>> {
        self.to_relay.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Registers request `id` (the client's id and progress token as sent) before it goes to
    /// the relay; at most `max` wait at once.
    pub(crate) fn register(
        self: &Arc<Self>,
        id: u64,
        client_id: &[u8],
        client_token: Option<&[u8]>,
        (sse, lists_tools): (bool, bool),
        max: usize,
    ) -> Result<Registered, Refused> {
        let mut waiting = self.lock();
        if waiting.closed {
            return Err(Refused::Closed);
        }
        if waiting.by_id.len() >= max {
            return Err(Refused::Full);
        }
        waiting.last_used = Some(std::time::Instant::now());
        let (tx, rx) = mpsc::channel(if sse { STREAM_QUEUE } else { 1 });
        waiting.by_id.insert(
            id,
            Waiter {
                client_id: Bytes::copy_from_slice(client_id),
                client_token: client_token.map(Bytes::copy_from_slice),
                tx,
                sse,
                lists_tools,
            },
        );
        Ok(Registered {
            rx,
            guard: CancelGuard {
                link: self.clone(),
                id,
            },
        })
    }

    /// Passes a (rewritten) request to the relay. False if the relay has ended: the link is
    /// then finished at once (the next request opens a new one), whether or not its relay's
    /// messages have all come back yet.
    pub(crate) async fn send(&self, message: Bytes, trace: Option<&TransportTrace>) -> bool {
        let sent = match self.sender() {
            Some(tx) => tx.send(super::trace::inbound(message, trace)).await.is_ok(),
            None => false,
        };
        if !sent {
            self.finish();
        }
        sent
    }

    /// No more requests: every one still waiting gets an error answer, and the front stops
    /// handing this link out.
    fn finish(&self) {
        let left: Vec<Waiter> = {
            let mut waiting = self.lock();
            waiting.closed = true;
            waiting.by_id.drain().map(|(_, w)| w).collect()
        };
        self.to_relay.lock().unwrap_or_else(|e| e.into_inner()).take();
        for waiter in left {
            let answer = message::error(
                std::str::from_utf8(&waiter.client_id).ok(),
                UPSTREAM_GONE,
                "the gate's connection to the server ended before the server answered",
            );
            tokio::spawn(answer_to(waiter, answer));
        }
        if let Some(home) = self.home.upgrade() {
            let mut links = home.links_by_caller.lock().unwrap_or_else(|e| e.into_inner());
            if links
                .get(&self.caller)
                .is_some_and(|l| std::ptr::eq(Arc::as_ptr(l), self))
            {
                links.remove(&self.caller);
            }
        }
    }

    /// The front's progress token for request `id`, as JSON text.
    pub(crate) fn token_for(id: u64) -> String {
        format!("\"{TOKEN_PREFIX}{id}\"")
    }

    /// Routes what the relay sends until it ends; then every request still waiting gets an
    /// error answer and the link is done.
    async fn route(self: Arc<Self>, mut from_relay: mpsc::Receiver<Bytes>) {
        while let Some(message) = from_relay.recv().await {
            self.deliver(&message).await;
        }
        self.finish();
        tracing::info!(target: "aml_mcp_http", "stateless relay connection ended");
    }

    async fn deliver(&self, message: &Bytes) {
        let Ok(text) = std::str::from_utf8(message) else {
            return;
        };
        match ServerMessage::read(text) {
            ServerMessage::Answer { id } => {
                let waiter = text[id.clone()]
                    .parse::<u64>()
                    .ok()
                    .and_then(|n| self.lock().by_id.remove(&n));
                let Some(waiter) = waiter else {
                    tracing::debug!(target: "aml_mcp_http", "an answer no stateless request waits for; dropped");
                    return;
                };
                if waiter.lists_tools {
                    if let Some(home) = self.home.upgrade() {
                        home.param_headers.learn(message);
                    }
                }
                let restored = splice(message, &mut [(id, &waiter.client_id[..])]);
                // Not awaited here: one slow reader must not hold up the others' answers.
                tokio::spawn(answer_to(waiter, Bytes::from(restored)));
            }
            ServerMessage::Progress { token } => {
                let number = serde_json::from_str::<String>(&text[token.clone()])
                    .ok()
                    .and_then(|t| t.strip_prefix(TOKEN_PREFIX)?.parse::<u64>().ok());
                let waiting = self.lock();
                let Some(waiter) = number.and_then(|n| waiting.by_id.get(&n)) else {
                    tracing::debug!(target: "aml_mcp_http", "progress for no waiting stateless request; dropped");
                    return;
                };
                let (Some(client_token), true) = (&waiter.client_token, waiter.sse) else {
                    return;
                };
                let restored = splice(message, &mut [(token, &client_token[..])]);
                // A client too slow to read its progress loses some, never its answer.
                let _ = waiter.tx.try_send(sse::message_event(&restored));
            }
            ServerMessage::Subscription { id } => {
                let waiting = self.lock();
                let waiter = text[id.clone()]
                    .parse::<u64>()
                    .ok()
                    .and_then(|n| waiting.by_id.get(&n))
                    .filter(|w| w.sse);
                let Some(waiter) = waiter else {
                    tracing::debug!(target: "aml_mcp_http", "a notification for no open stateless subscription; dropped");
                    return;
                };
                let restored = splice(message, &mut [(id, &waiter.client_id[..])]);
                if waiter.tx.try_send(sse::message_event(&restored)).is_err() {
                    tracing::warn!(target: "aml_mcp_http", "a stateless subscriber is not reading its stream; a notification was dropped");
                }
            }
            ServerMessage::Request { id } => {
                // 2026-07-28 has no server-to-client requests over HTTP: say so at once
                // rather than let the server wait.
                let answer = message::error(
                    Some(&text[id]),
                    -32601,
                    "no client can answer a server request over 2026-07-28 stateless HTTP",
                );
                if let Some(tx) = self.sender() {
                    let _ = tx.send(Inbound::Message(answer)).await;
                }
            }
            ServerMessage::Other => {
                tracing::debug!(target: "aml_mcp_http", "a server message tied to no stateless request; dropped (no stream to carry it)");
            }
        }
    }
}

/// Sends a request's answer on its POST (an SSE event, or the JSON body) and ends it.
async fn answer_to(waiter: Waiter, answer: Bytes) {
    let chunk = if waiter.sse {
        sse::message_event(&answer)
    } else {
        answer
    };
    // Waits for room behind queued progress (the client is reading), not for long: a
    // client that stopped reading has dropped its receiver and this fails at once.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), waiter.tx.send(chunk)).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn text(bytes: &Bytes) -> &str {
        std::str::from_utf8(bytes).unwrap()
    }

    /// One link per caller, at most `max`: at the cap the idlest link gives way to a new
    /// caller's (its relay sees its client leave); with every link busy, a new caller is
    /// refused, and a known caller still gets its own link.
    #[tokio::test]
    async fn callers_get_links_of_their_own_up_to_the_cap() {
        let home = Arc::new(Stateless::default());
        let peer = "127.0.0.1:1".parse().unwrap();
        let who = |name: &str| Some(name.to_owned());
        let (alice, Some((_alice_relay, info))) = home.link(peer, &who("alice"), 2).unwrap() else {
            panic!("a new link for alice")
        };
        assert_eq!(info.caller.as_deref(), Some("alice"));
        let (bob, Some((mut bob_relay, _))) = home.link(peer, &who("bob"), 2).unwrap() else {
            panic!("a new link for bob")
        };
        assert!(!Arc::ptr_eq(&alice, &bob), "each caller its own relay");
        // Alice has a request waiting; bob is idle: carol's link replaces bob's.
        let _waiting = alice
            .register(home.next_id(), b"1", None, (false, false), 4)
            .ok()
            .unwrap();
        let (carol, Some(_)) = home.link(peer, &who("carol"), 2).unwrap() else {
            panic!("a new link for carol")
        };
        assert!(
            bob_relay.incoming.recv().await.is_none(),
            "bob's relay saw its client leave"
        );
        assert!(matches!(
            bob.register(home.next_id(), b"2", None, (false, false), 4),
            Err(Refused::Closed)
        ));
        // Alice and carol both busy: dave is refused, alice keeps hers.
        let _also = carol
            .register(home.next_id(), b"3", None, (false, false), 4)
            .ok()
            .unwrap();
        assert!(home.link(peer, &who("dave"), 2).is_err());
        let (again, None) = home.link(peer, &who("alice"), 2).unwrap() else {
            panic!("alice's own link")
        };
        assert!(Arc::ptr_eq(&again, &alice));
    }

    #[tokio::test]
    async fn answers_and_progress_get_the_clients_ids_back_and_the_rest_has_nowhere_to_go() {
        let home = Arc::new(Stateless::default());
        let peer = "127.0.0.1:1".parse().unwrap();
        let (link, Some((mut relay, info))) = home.link(peer, &None, 64).unwrap() else {
            panic!("a new link")
        };
        assert!(info.stateless);
        // The same link for the next request.
        assert!(home.link(peer, &None, 64).unwrap().1.is_none());
        let (a, b) = (home.next_id(), home.next_id());
        let mut sse = link
            .register(a, b"\"x\"", Some(b"7"), (true, false), 2)
            .ok()
            .unwrap();
        let mut json = link
            .register(b, b"\"x\"", Some(b"7"), (false, false), 2)
            .ok()
            .unwrap();
        assert!(matches!(
            link.register(99, b"1", None, (false, false), 2),
            Err(Refused::Full)
        ));

        let to_front = relay.outgoing.clone();
        let say = |m: String| {
            let to_front = to_front.clone();
            async move { to_front.send(Bytes::from(m)).await.unwrap() }
        };
        for id in [a, b] {
            let token = Link::token_for(id);
            say(format!(
                r#"{{"method":"notifications/progress","params":{{"progressToken":{token},"progress":1}}}}"#
            ))
            .await;
        }
        say(r#"{"method":"notifications/message","params":{"data":"for nobody"}}"#.into()).await;
        say(r#"{"jsonrpc":"2.0","id":"srv-1","method":"roots/list"}"#.into()).await;
        say(format!(r#"{{"jsonrpc":"2.0","id":{a},"result":{{"n":1}}}}"#)).await;

        // The SSE stream: its own progress, token restored, then its answer, id restored.
        let progress = tokio::time::timeout(Duration::from_secs(5), sse.rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(text(&progress).contains(r#""progressToken":7,"#), "{progress:?}");
        let answer = tokio::time::timeout(Duration::from_secs(5), sse.rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(
            text(&answer).contains(r#""id":"x","result":{"n":1}"#),
            "{answer:?}"
        );
        // The server's request is answered at once, to the server.
        let Some(Inbound::Message(refusal)) = relay.incoming.recv().await else {
            panic!("an answer to the server")
        };
        assert!(
            text(&refusal).contains(r#""id":"srv-1","error":{"code":-32601"#),
            "{refusal:?}"
        );
        // A JSON body gets no progress; when the relay ends, its request is answered.
        drop((to_front, relay));
        let gone = tokio::time::timeout(Duration::from_secs(5), json.rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(
            text(&gone).contains(r#""id":"x","error":{"code":-32000"#),
            "{gone:?}"
        );
        assert!(json.rx.recv().await.is_none());
        // The next request opens a new link.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(home.link(peer, &None, 64).unwrap().1.is_some());
        drop((sse.guard, json.guard));
    }

    #[tokio::test]
    async fn a_subscriptions_notifications_reach_its_stream_with_the_clients_id() {
        let home = Arc::new(Stateless::default());
        let (link, Some((relay, _))) = home.link("127.0.0.1:1".parse().unwrap(), &None, 64).unwrap() else {
            panic!("a new link")
        };
        let (listen, plain) = (home.next_id(), home.next_id());
        let mut stream = link
            .register(listen, b"\"sub\"", None, (true, false), 4)
            .ok()
            .unwrap();
        let mut json = link.register(plain, b"2", None, (false, false), 4).ok().unwrap();
        let note = |id: u64| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{{"_meta":{{"io.modelcontextprotocol/subscriptionId":{id}}}}}}}"#
            )
        };
        for id in [listen, plain, 999] {
            relay.outgoing.send(Bytes::from(note(id))).await.unwrap();
        }
        let event = tokio::time::timeout(Duration::from_secs(5), stream.rx.recv())
            .await
            .unwrap()
            .unwrap();
        let expected = note(listen).replace(&format!(":{listen}}}"), r#":"sub"}"#);
        assert!(text(&event).contains(&expected), "{event:?}");
        // The subscription's answer ends it, on the same stream.
        let end = format!(r#"{{"jsonrpc":"2.0","id":{listen},"result":{{}}}}"#);
        relay.outgoing.send(Bytes::from(end)).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), stream.rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(text(&answer).contains(r#""id":"sub","result""#), "{answer:?}");
        // A JSON request has no stream: nothing of another id's subscription reached it.
        assert!(json.rx.try_recv().is_err());
        drop((stream.guard, json.guard));
    }

    /// A link with one request registered (under the front's id, for the client's id `5`),
    /// and the relay's end of the link.
    fn one_waiting() -> (Arc<Link>, Connection, u64, Registered) {
        let home = Arc::new(Stateless::default());
        let (link, Some((relay, _))) = home.link("127.0.0.1:1".parse().unwrap(), &None, 64).unwrap() else {
            panic!("a new link")
        };
        let id = home.next_id();
        let registered = link.register(id, b"5", None, (true, false), 4).ok().unwrap();
        (link, relay, id, registered)
    }

    fn assert_cancels(note: &Bytes, id: u64) {
        let expected = format!(r#""method":"notifications/cancelled","params":{{"requestId":{id},"#);
        assert!(text(note).contains(&expected), "{note:?}");
    }

    #[tokio::test]
    async fn a_request_dropped_before_its_answer_is_cancelled_with_the_fronts_id() {
        let (link, mut relay, id, registered) = one_waiting();
        drop(registered);
        let Some(Inbound::Message(note)) = relay.incoming.recv().await else {
            panic!("a cancellation")
        };
        assert_cancels(&note, id);
        // An answer that comes anyway goes nowhere.
        relay
            .outgoing
            .send(Bytes::from(format!(r#"{{"id":{id},"result":{{}}}}"#)))
            .await
            .unwrap();
        assert!(link.lock().by_id.is_empty());
    }

    /// A relay too busy to take the cancellation at once still gets it, after what was queued
    /// before it.
    #[tokio::test]
    async fn a_cancellation_waits_for_room_rather_than_be_lost() {
        let (link, mut relay, id, registered) = one_waiting();
        let tx = link.sender().unwrap();
        let mut queued = 0;
        while tx.try_send(Inbound::Message(Bytes::from_static(b"{}"))).is_ok() {
            queued += 1;
        }
        drop(registered);
        for _ in 0..queued {
            assert!(matches!(relay.incoming.recv().await, Some(Inbound::Message(m)) if &m[..] == b"{}"));
        }
        let next = tokio::time::timeout(Duration::from_secs(5), relay.incoming.recv()).await;
        let Ok(Some(Inbound::Message(note))) = next else {
            panic!("the cancellation after the queued messages")
        };
        assert_cancels(&note, id);
    }
}
