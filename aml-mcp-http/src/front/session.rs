//! One MCP session of the front: its streams (each POST that carries requests is an
//! endpoint of the session's relay, the GET stream its standing one; ADR 032), what each SSE
//! stream sent, for resumption, and the messages kept until a GET stream opens. The relay
//! addresses every message, so nothing here reads one to route it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use aml_mcp::relay::{EndpointEvent, EndpointId, ToEndpoint, TransportTrace, STANDING};

use super::trace::inbound;
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::auth::Client;
use crate::message::{self, Peek};
use crate::sse;

/// Chunks queued for one HTTP response before the relay waits for the client; also what the
/// relay queues for one endpoint.
const STREAM_QUEUE: usize = 256;

/// Finished POST streams kept for resumption, per session.
const FINISHED_KEPT: usize = 16;

/// Messages kept for a GET stream that is not open yet.
const UNROUTED_LIMIT: usize = 1024;

/// Bytes of SSE events kept per stream for resumption (the oldest go first), and of
/// messages kept for a GET stream: a session's memory stays bounded whatever its messages
/// weigh.
const KEPT_BYTES: usize = 1 << 20;

/// One session.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) id: String,
    /// What logs call it (its id is logged at debug only).
    pub(crate) name: String,
    /// Who opened it: only requests from the same token may use it.
    pub(crate) client: Client,
    to_relay: Mutex<Option<mpsc::Sender<EndpointEvent>>>,
    state: Mutex<State>,
    replay_events: usize,
}

#[derive(Debug)]
struct State {
    /// By endpoint (the GET stream is not one: it takes what goes to [`STANDING`]).
    streams: BTreeMap<u64, Stream>,
    /// The standalone (GET) stream, if one was opened.
    get_stream: Option<u64>,
    /// Server messages no stream could take, for the next GET stream.
    unrouted: VecDeque<Bytes>,
    /// Streams that sent everything they owed, oldest first (kept for resumption).
    finished: VecDeque<u64>,
    next_stream: u64,
    last_active: Instant,
    /// A request other than `initialize` was sent in it.
    used: bool,
    closed: bool,
}

#[derive(Debug)]
struct Stream {
    /// Where its events go now; `None` while the client is away (it may resume).
    tx: Option<mpsc::Sender<Bytes>>,
    /// SSE events (id, encoded), newest last, for `Last-Event-ID`.
    history: VecDeque<(u64, Bytes)>,
    history_bytes: usize,
    next_seq: u64,
    /// The ids of the requests still owed an answer (a POST stream ends after the last):
    /// if the session ends first, each gets an error answer.
    owed: Vec<String>,
    /// Answers are collected into one JSON body: no other message goes to it.
    json: bool,
    is_get: bool,
    /// The client cancelled a request of it: each answer is then read for its id, and a
    /// late one to the cancelled request dropped.
    cancelled: bool,
}

impl Stream {
    fn new(tx: mpsc::Sender<Bytes>, owed: Vec<String>, json: bool, is_get: bool) -> Self {
        Stream {
            tx: Some(tx),
            history: VecDeque::new(),
            history_bytes: 0,
            next_seq: 1,
            owed,
            json,
            is_get,
            cancelled: false,
        }
    }

    /// Takes `answer`'s id off what the stream owes; false if it owes no such answer (one
    /// to a request the client cancelled). A batch's answer, or any after a cancellation, is
    /// read for its id; one request's is not.
    fn answered(&mut self, answer: &[u8]) -> bool {
        if self.owed.len() > 1 || self.cancelled {
            let id = Peek::of_relayed(answer).and_then(|p| p.id);
            if let Some(at) = self.owed.iter().position(|owed| Some(owed) == id.as_ref()) {
                self.owed.swap_remove(at);
                return true;
            }
            if self.cancelled {
                return false;
            }
        }
        self.owed.pop().is_some()
    }
}

impl State {
    fn owes(&self) -> usize {
        self.streams.values().map(|s| s.owed.len()).sum()
    }
}

/// A POST's stream, registered before its messages go to the relay.
pub(crate) struct PostStream {
    /// Its endpoint: its messages go to the relay from it, the relay's to it.
    pub(crate) endpoint: EndpointId,
    /// What the handler writes to the client.
    pub(crate) rx: mpsc::Receiver<Bytes>,
    /// What the relay sends the endpoint, for [`Session::pump`].
    pub(crate) from_relay: mpsc::Receiver<ToEndpoint>,
    /// The endpoint's opening, for [`Session::send`].
    pub(crate) open: EndpointEvent,
}

/// Why a POST could not be registered.
pub(crate) enum Refused {
    Closed,
    TooManyCalls,
}

impl Session {
    /// A new session, and what its relay sends the standing stream (for [`Session::pump`]);
    /// `to_relay` is the relay's client side ([`aml_mcp::relay::Client::Session`]).
    pub(crate) fn new(
        id: String,
        name: String,
        client: Client,
        to_relay: mpsc::Sender<EndpointEvent>,
        replay_events: usize,
    ) -> (Self, mpsc::Receiver<ToEndpoint>) {
        // As many as wait for a GET stream: a burst of server messages is kept, not dropped.
        let (to, from_relay) = mpsc::channel(UNROUTED_LIMIT);
        let open = EndpointEvent::Open {
            endpoint: STANDING,
            to,
            stream: true,
        };
        // A new channel: the first event always fits.
        let _ = to_relay.try_send(open);
        let session = Session {
            id,
            name,
            client,
            to_relay: Mutex::new(Some(to_relay)),
            state: Mutex::new(State {
                streams: BTreeMap::new(),
                get_stream: None,
                unrouted: VecDeque::new(),
                finished: VecDeque::new(),
                next_stream: 1,
                last_active: Instant::now(),
                used: false,
                closed: false,
            }),
            replay_events,
        };
        (session, from_relay)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the session ended (DELETE, idle, or its relay is gone).
    pub(crate) fn is_closed(&self) -> bool {
        self.state().closed
    }

    /// Since when the session has been idle (nothing from the client, no request waiting
    /// for its answer), and whether it was ever used; `None` while a request waits.
    pub(crate) fn idle_since(&self) -> Option<(Instant, bool)> {
        let state = self.state();
        (state.owes() == 0).then_some((state.last_active, state.used))
    }

    /// Whether a request other than `initialize` was sent in it.
    pub(crate) fn was_used(&self) -> bool {
        self.state().used
    }

    /// Ends the session: the relay sees the client leave, every stream ends.
    pub(crate) fn close(&self) {
        self.to_relay.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut state = self.state();
        state.closed = true;
        state.streams.clear();
    }

    /// Passes client messages to the relay, in order, each from its endpoint and with the
    /// POST's trace headers, after `open` (the POST's endpoint's opening, if it has one).
    /// False if the session has ended.
    pub(crate) async fn send(
        &self,
        open: Option<EndpointEvent>,
        messages: Vec<(EndpointId, Bytes)>,
        trace: Option<&TransportTrace>,
    ) -> bool {
        let Some(tx) = self.to_relay.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
            return false;
        };
        self.state().last_active = Instant::now();
        if let Some(open) = open {
            if tx.send(open).await.is_err() {
                return false;
            }
        }
        for (endpoint, m) in messages {
            let inbound = inbound(m, trace);
            if tx
                .send(EndpointEvent::Message { endpoint, inbound })
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    }

    /// Opens the stream that will carry the answers to `requests` (and, unless `json`,
    /// messages the server sends meanwhile).
    pub(crate) fn open_post(
        &self,
        requests: &[Peek],
        json: bool,
        max_calls: usize,
    ) -> Result<PostStream, Refused> {
        let mut state = self.state();
        if state.closed {
            return Err(Refused::Closed);
        }
        if state.owes() + requests.len() > max_calls {
            return Err(Refused::TooManyCalls);
        }
        let number = state.next_stream;
        state.next_stream += 1;
        // A JSON body takes exactly one message per request: room for all, so none is lost.
        let room = if json { requests.len() } else { STREAM_QUEUE };
        let (tx, rx) = mpsc::channel(room.max(1));
        let owed = requests
            .iter()
            .map(|r| r.id.clone().unwrap_or_default())
            .collect();
        state.used |= requests.iter().any(|r| r.method.as_deref() != Some("initialize"));
        state.streams.insert(number, Stream::new(tx, owed, json, false));
        state.last_active = Instant::now();
        let (to, from_relay) = mpsc::channel(STREAM_QUEUE);
        Ok(PostStream {
            endpoint: number,
            rx,
            from_relay,
            open: EndpointEvent::Open {
                endpoint: number,
                to,
                stream: !json,
            },
        })
    }

    /// Opens the standalone GET stream, or resumes a stream after `last_event` (`stream-seq`):
    /// the events it missed first. `None` if there is nothing to resume from that id.
    pub(crate) fn open_get(&self, last_event: Option<&str>) -> Option<mpsc::Receiver<Bytes>> {
        let mut state = self.state();
        if state.closed {
            return None;
        }
        let (number, rx) = match last_event {
            Some(id) => {
                let (stream, seq) = id.split_once('-')?;
                let (number, seq): (u64, u64) = (stream.parse().ok()?, seq.parse().ok()?);
                let stream = state.streams.get_mut(&number)?;
                if seq >= stream.next_seq {
                    // An event this stream never sent.
                    return None;
                }
                let missed: Vec<&Bytes> = stream
                    .history
                    .iter()
                    .filter(|(s, _)| *s > seq)
                    .map(|(_, e)| e)
                    .collect();
                // Room for the whole replay besides the live queue: a replay loses nothing,
                // however many events the host keeps.
                let (tx, rx) = mpsc::channel(STREAM_QUEUE + missed.len());
                for event in missed {
                    let _ = tx.try_send(event.clone());
                }
                if stream.is_get || !stream.owed.is_empty() {
                    stream.tx = Some(tx);
                }
                // A finished stream: the replay is all there is, and the stream stays (among
                // the last FINISHED_KEPT) for a client that loses this one too.
                (number, rx)
            }
            None => {
                let (tx, rx) = mpsc::channel(STREAM_QUEUE);
                let number = state.next_stream;
                state.next_stream += 1;
                state
                    .streams
                    .insert(number, Stream::new(tx, Vec::new(), false, true));
                (number, rx)
            }
        };
        if state.streams.get(&number).is_some_and(|s| s.is_get) {
            if let Some(old) = state.get_stream.replace(number) {
                if old != number {
                    state.streams.remove(&old);
                }
            }
            let queued: Vec<Bytes> = state.unrouted.drain(..).collect();
            for m in queued {
                self.push(&mut state, number, &m);
            }
        }
        Some(rx)
    }

    /// Writes what the relay sends endpoint `number` to its stream until the relay lets the
    /// endpoint go (asked to after the stream's last answer, so a client may resume it
    /// until then), or ends. The standing endpoint's messages go to the GET stream; its end
    /// is the relay's. `initialize` (its id) ends the session when the server refuses it.
    pub(crate) async fn pump(
        self: Arc<Self>,
        number: EndpointId,
        mut from_relay: mpsc::Receiver<ToEndpoint>,
        initialize: Option<String>,
    ) {
        while let Some(message) = from_relay.recv().await {
            match message {
                ToEndpoint::Answer(answer) if number == STANDING => {
                    tracing::debug!(target: "aml_mcp_http", "{}: an answer to a message that asked none; dropped", self.name);
                    drop(answer)
                }
                ToEndpoint::Answer(answer) => {
                    let refused = initialize
                        .as_deref()
                        .and_then(|init| handshake_failed(&answer, init))
                        == Some(true);
                    if self.answer(number, &answer) {
                        self.let_go(number);
                    }
                    if refused {
                        // No session to keep (nor its server).
                        tracing::info!(target: "aml_mcp_http", "{}: the server refused initialize; the session ends", self.name);
                        self.close();
                    }
                }
                ToEndpoint::Notification(message) => self.notify(number, &message),
            }
        }
        // The relay ended, or never took the endpoint (its POST went away before): what it
        // did not answer never will be.
        let why = "the gate's session with the server ended before the server answered";
        match number {
            STANDING => self.end(aml_mcp::relay::UPSTREAM_GONE, why),
            _ => self.answer_owed(Some(number), aml_mcp::relay::UPSTREAM_GONE, why),
        }
    }

    /// Writes an answer to stream `number`; true once the stream has every answer it owed
    /// (its response then ends; its history stays for a client that lost the end).
    fn answer(&self, number: EndpointId, answer: &Bytes) -> bool {
        let mut state = self.state();
        let Some(stream) = state.streams.get_mut(&number) else {
            return false;
        };
        if !stream.answered(answer) {
            tracing::debug!(target: "aml_mcp_http", "{}: an answer to a request the client cancelled; dropped", self.name);
            return false;
        }
        let done = stream.owed.is_empty();
        self.push(&mut state, number, answer);
        if done {
            self.finish(&mut state, number);
        }
        done
    }

    /// The client cancelled its request `id` (`notifications/cancelled`): no answer comes
    /// (MCP), so its stream no longer waits for one, and ends if it owes nothing else.
    pub(crate) fn cancelled(&self, id: &str) {
        let mut state = self.state();
        let owing = state
            .streams
            .iter_mut()
            .find(|(_, s)| s.owed.iter().any(|o| o == id));
        let Some((&number, stream)) = owing else {
            return;
        };
        stream.owed.retain(|o| o != id);
        stream.cancelled = true;
        if stream.owed.is_empty() {
            self.finish(&mut state, number);
            drop(state);
            self.let_go(number);
        }
    }

    /// Ends stream `number`, which owes no more answers: its response ends (its history
    /// stays for a client that lost the end).
    fn finish(&self, state: &mut State, number: EndpointId) {
        if state.owes() == 0 {
            // Idle from the last answer on, not from the request (a server that took long
            // to answer initialize does not shorten the wait).
            state.last_active = Instant::now();
        }
        let json = match state.streams.get_mut(&number) {
            Some(stream) => {
                stream.tx = None;
                stream.json
            }
            None => return,
        };
        if json || self.replay_events == 0 {
            state.streams.remove(&number);
        } else {
            state.finished.push_back(number);
            if state.finished.len() > FINISHED_KEPT {
                if let Some(old) = state.finished.pop_front() {
                    state.streams.remove(&old);
                }
            }
        }
    }

    /// A message for stream `number` (the standing one: the GET stream's): one that came
    /// after the stream's last answer goes where the standing one's go.
    fn notify(&self, number: EndpointId, message: &Bytes) {
        let mut state = self.state();
        if state.closed {
            return;
        }
        let open = |s: &Stream| !s.owed.is_empty() && !s.json;
        let target = match state.streams.get(&number) {
            Some(stream) if number != STANDING && open(stream) => Some(number),
            _ => state.get_stream,
        };
        match target {
            Some(number) => self.push(&mut state, number, message),
            None if state.unrouted.len() < UNROUTED_LIMIT
                && state.unrouted.iter().map(Bytes::len).sum::<usize>() + message.len() <= KEPT_BYTES =>
            {
                state.unrouted.push_back(message.clone())
            }
            None => {
                tracing::warn!(target: "aml_mcp_http", "{}: no stream open for a server message; dropped", self.name)
            }
        }
    }

    /// Tells the relay that endpoint `number` has what it owed.
    fn let_go(&self, number: EndpointId) {
        let Some(tx) = self.to_relay.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
            return;
        };
        let close = EndpointEvent::Close { endpoint: number };
        if let Err(mpsc::error::TrySendError::Full(close)) = tx.try_send(close) {
            // Nothing else would free the relay's endpoint: wait for room.
            tokio::spawn(async move { tx.send(close).await });
        }
    }

    /// Sends one message on a stream (as an SSE event, or raw for a JSON body) and keeps it
    /// for resumption.
    fn push(&self, state: &mut State, number: u64, message: &Bytes) {
        let Some(stream) = state.streams.get_mut(&number) else {
            return;
        };
        let chunk = if stream.json {
            message.clone()
        } else {
            let seq = stream.next_seq;
            stream.next_seq += 1;
            let event = sse::event(&format!("{number}-{seq}"), message);
            if self.replay_events > 0 {
                stream.history_bytes += event.len();
                stream.history.push_back((seq, event.clone()));
                while stream.history.len() > self.replay_events
                    || (stream.history_bytes > KEPT_BYTES && stream.history.len() > 1)
                {
                    if let Some((_, old)) = stream.history.pop_front() {
                        stream.history_bytes -= old.len();
                    }
                }
            }
            event
        };
        if let Some(tx) = &stream.tx {
            // A client too slow to take STREAM_QUEUE chunks, or gone: it can resume.
            if tx.try_send(chunk).is_err() {
                stream.tx = None;
            }
        }
    }

    /// Ends the session with an error answer (`code`, `why`) to every request still waiting,
    /// so that no POST's stream ends without the answer it waits for.
    pub(crate) fn end(&self, code: i64, why: &str) {
        self.to_relay.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.answer_owed(None, code, why);
        self.close();
    }

    /// Answers with an error (`code`, `why`) each request still waiting on stream `number`
    /// (on every stream, for `None`).
    fn answer_owed(&self, number: Option<EndpointId>, code: i64, why: &str) {
        let owed: Vec<(u64, String)> = {
            let state = self.state();
            let owes = |(n, s): (&u64, &Stream)| s.owed.iter().map(|id| (*n, id.clone())).collect::<Vec<_>>();
            match number {
                // Most often the stream has had its answers, or is gone.
                Some(n) => state.streams.get_key_value(&n).map(owes).unwrap_or_default(),
                None => state.streams.iter().flat_map(owes).collect(),
            }
        };
        for (n, id) in owed {
            self.answer(n, &message::error(Some(&id), code, why));
        }
    }
}

/// Whether `message` answers the `initialize` with id `init` with an error; `None` when it
/// is not that answer.
pub(super) fn handshake_failed(message: &[u8], init: &str) -> Option<bool> {
    let peek = Peek::of(message)?;
    if !peek.is_response() || peek.id.as_deref() != Some(init) {
        return None;
    }
    let answer: serde_json::Value = serde_json::from_slice(message).ok()?;
    Some(answer.get("error").is_some())
}

/// Every open session, by id.
pub(crate) type Sessions = Arc<Mutex<HashMap<String, Arc<Session>>>>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn session(replay: usize) -> (Session, mpsc::Receiver<EndpointEvent>) {
        let (tx, rx) = mpsc::channel(8);
        let client = Client::Address([127, 0, 0, 1].into());
        let (session, _standing) = Session::new("s".into(), "session 1".into(), client, tx, replay);
        (session, rx)
    }

    fn request(id: &str) -> Peek {
        Peek {
            id: Some(id.into()),
            method: Some("tools/call".into()),
            bad_id: false,
            tool: None,
        }
    }

    fn kept(session: &Session, number: u64) -> (usize, usize) {
        let state = session.state();
        let stream = &state.streams[&number];
        (stream.history.len(), stream.history_bytes)
    }

    fn note(text: &'static str) -> Bytes {
        Bytes::from_static(text.as_bytes())
    }

    #[test]
    fn a_stream_ends_after_its_answers_and_lets_its_endpoint_go() {
        let (s, mut relay) = session(8);
        assert!(matches!(
            relay.try_recv(),
            Ok(EndpointEvent::Open {
                endpoint: STANDING,
                ..
            })
        ));
        let mut a = s.open_post(&[request("1")], false, 4).ok().unwrap();
        let json = s
            .open_post(&[request("2"), request("\"x\"")], true, 4)
            .ok()
            .unwrap();
        assert!(matches!(
            s.open_post(&[request("3"), request("4")], false, 4),
            Err(Refused::TooManyCalls)
        ));
        for _ in 0..20 {
            s.notify(
                a.endpoint,
                &note(r#"{"method":"notifications/message","params":{}}"#),
            );
        }
        assert_eq!(kept(&s, a.endpoint).0, 8, "at most replay_events kept");
        let big = Bytes::from(format!(
            "{{\"method\":\"m\",\"params\":{{\"x\":\"{}\"}}}}",
            "x".repeat(400_000)
        ));
        for _ in 0..5 {
            s.notify(a.endpoint, &big);
        }
        assert!(kept(&s, a.endpoint).1 <= KEPT_BYTES, "{:?}", kept(&s, a.endpoint));
        assert!(s.idle_since().is_none(), "requests wait");

        // A batch's answers are told apart by id; the stream ends after the last.
        assert!(!s.answer(json.endpoint, &note(r#"{"id":"x","result":{}}"#)));
        assert!(s.answer(json.endpoint, &note(r#"{"id":2,"result":{}}"#)));
        assert!(s.answer(a.endpoint, &note(r#"{"id":1,"result":{}}"#)));
        s.let_go(a.endpoint);
        assert!(matches!(relay.try_recv(), Ok(EndpointEvent::Close { endpoint }) if endpoint == a.endpoint));
        let mut last = None;
        while let Ok(event) = a.rx.try_recv() {
            last = Some(event);
        }
        assert!(
            last.unwrap().windows(7).any(|w| w == b"\"id\":1,"),
            "the answer came last"
        );
        assert!(matches!(
            a.rx.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        assert!(s.idle_since().is_some(), "nothing waits");

        // What comes after the last answer waits for the GET stream.
        s.notify(a.endpoint, &note(r#"{"method":"late","params":{}}"#));
        let mut get = s.open_get(None).unwrap();
        assert!(get.try_recv().unwrap().windows(6).any(|w| w == b"\"late\""));
    }

    #[test]
    fn an_ended_session_answers_what_waits() {
        let (s, _relay) = session(0);
        let mut batch = s.open_post(&[request("1"), request("2")], true, 4).ok().unwrap();
        let mut other = s.open_post(&[request("3")], false, 4).ok().unwrap();
        assert!(!s.answer(batch.endpoint, &note(r#"{"id":2,"result":{}}"#)));
        s.end(-32000, "DELETE");
        let mut answered = Vec::new();
        while let Ok(answer) = batch.rx.try_recv() {
            let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
            answered.push((answer["id"].clone(), answer["error"]["message"].clone()));
        }
        assert_eq!(answered, [(json!(2), json!(null)), (json!(1), json!("DELETE"))]);
        assert!(other.rx.try_recv().unwrap().windows(6).any(|w| w == b"DELETE"));
        assert!(s.is_closed());
    }

    /// A request the client cancels is owed no answer: its stream ends when it owes nothing
    /// else, and a late answer to it is dropped, not taken for another request's.
    #[test]
    fn a_cancelled_request_is_owed_no_answer() {
        let (s, mut relay) = session(8);
        let _ = relay.try_recv();
        let mut one = s.open_post(&[request("1")], false, 4).ok().unwrap();
        let mut batch = s.open_post(&[request("2"), request("3")], true, 4).ok().unwrap();
        s.cancelled("1");
        assert!(
            matches!(relay.try_recv(), Ok(EndpointEvent::Close { endpoint }) if endpoint == one.endpoint)
        );
        assert!(matches!(
            one.rx.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        s.cancelled("3");
        assert!(
            !s.answer(batch.endpoint, &note(r#"{"id":3,"result":{}}"#)),
            "late"
        );
        assert!(s.answer(batch.endpoint, &note(r#"{"id":2,"result":{}}"#)));
        assert!(batch.rx.try_recv().unwrap().starts_with(br#"{"id":2"#));
        assert!(batch.rx.try_recv().is_err());
        assert!(s.idle_since().is_some(), "nothing waits");
    }

    /// A POST that went away before its endpoint reached the relay (its opening dropped):
    /// its stream owes nothing once its endpoint ends, so the session can still idle out.
    #[tokio::test]
    async fn a_stream_whose_endpoint_the_relay_never_took_is_answered() {
        let (s, _relay) = session(0);
        let s = Arc::new(s);
        let post = s.open_post(&[request("1")], true, 4).ok().unwrap();
        drop(post.open);
        Arc::clone(&s).pump(post.endpoint, post.from_relay, None).await;
        let mut rx = post.rx;
        let answer = rx.recv().await.unwrap();
        assert!(answer.windows(12).any(|w| w == b"server ended"), "{answer:?}");
        assert!(s.idle_since().is_some());
    }

    /// A host that keeps more events than a stream's live queue holds gets every one of them
    /// back on a resume, not the first queue's worth.
    #[test]
    fn a_resume_replays_every_kept_event() {
        let kept_events = STREAM_QUEUE + 44;
        let (s, _relay) = session(kept_events);
        let live = s.open_get(None).unwrap();
        let number = s.state().get_stream.unwrap();
        for i in 0..kept_events {
            let note = format!(r#"{{"method":"notifications/message","params":{{"n":{i}}}}}"#);
            s.notify(STANDING, &Bytes::from(note));
        }
        drop(live);
        let never_sent = format!("{number}-{}", kept_events + 1);
        assert!(s.open_get(Some(&never_sent)).is_none(), "an event id never given");
        let mut resumed = s.open_get(Some(&format!("{number}-0"))).unwrap();
        let mut replayed = 0;
        while let Ok(event) = resumed.try_recv() {
            let wanted = format!(r#""n":{replayed}}}"#);
            assert!(
                event.windows(wanted.len()).any(|w| w == wanted.as_bytes()),
                "event {replayed} in order"
            );
            replayed += 1;
        }
        assert_eq!(replayed, kept_events);
    }
}
