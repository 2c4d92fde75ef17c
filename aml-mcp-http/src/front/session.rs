//! One MCP session of the front: where each message from the relay goes (the POST stream
//! that waits for it, the GET stream, or a queue until one opens), and what each SSE stream
//! sent, for resumption.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use aml_mcp::relay::{Inbound, TransportTrace};

use super::trace::inbound;
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::auth::Client;
use crate::message::{self, Peek};
use crate::sse;

/// Chunks queued for one HTTP response before the relay waits for the client.
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
    to_relay: Mutex<Option<mpsc::Sender<Inbound>>>,
    state: Mutex<State>,
    replay_events: usize,
}

#[derive(Debug)]
struct State {
    /// Request id (JSON text) → the stream its answer goes to.
    waiting: HashMap<String, u64>,
    streams: HashMap<u64, Stream>,
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
    /// Answers still owed on this stream (a POST stream ends after the last).
    owed: usize,
    /// Answers are collected into one JSON body: no other message goes to it.
    json: bool,
    progress_tokens: Vec<String>,
    is_get: bool,
}

/// What a POST registers before its messages go to the relay.
pub(crate) struct PostStream {
    pub(crate) rx: mpsc::Receiver<Bytes>,
}

/// Why a POST could not be registered.
pub(crate) enum Refused {
    Closed,
    TooManyCalls,
    DuplicateId(String),
}

impl Session {
    pub(crate) fn new(
        id: String,
        name: String,
        client: Client,
        to_relay: mpsc::Sender<Inbound>,
        replay_events: usize,
    ) -> Self {
        Session {
            id,
            name,
            client,
            to_relay: Mutex::new(Some(to_relay)),
            state: Mutex::new(State {
                waiting: HashMap::new(),
                streams: HashMap::new(),
                get_stream: None,
                unrouted: VecDeque::new(),
                finished: VecDeque::new(),
                next_stream: 1,
                last_active: Instant::now(),
                used: false,
                closed: false,
            }),
            replay_events,
        }
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
        state
            .waiting
            .is_empty()
            .then_some((state.last_active, state.used))
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
        state.waiting.clear();
    }

    /// Passes client messages to the relay, in order, each with the POST's trace headers.
    /// False if the session has ended.
    pub(crate) async fn send(&self, messages: Vec<Bytes>, trace: Option<&TransportTrace>) -> bool {
        let Some(tx) = self.to_relay.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
            return false;
        };
        self.state().last_active = Instant::now();
        for m in messages {
            if tx.send(inbound(m, trace)).await.is_err() {
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
        if state.waiting.len() + requests.len() > max_calls {
            return Err(Refused::TooManyCalls);
        }
        let mut ids = std::collections::HashSet::new();
        for r in requests {
            let id = r.id.clone().unwrap_or_default();
            // Twice in one batch, or already waiting: its answer could not be told apart.
            if state.waiting.contains_key(&id) || !ids.insert(id.clone()) {
                return Err(Refused::DuplicateId(id));
            }
        }
        let number = state.next_stream;
        state.next_stream += 1;
        // A JSON body takes exactly one message per request: room for all, so none is lost.
        let room = if json { requests.len() } else { STREAM_QUEUE };
        let (tx, rx) = mpsc::channel(room.max(1));
        for r in requests {
            state.waiting.insert(r.id.clone().unwrap_or_default(), number);
        }
        state.used |= requests.iter().any(|r| r.method.as_deref() != Some("initialize"));
        state.streams.insert(
            number,
            Stream {
                tx: Some(tx),
                history: VecDeque::new(),
                history_bytes: 0,
                next_seq: 1,
                owed: requests.len(),
                json,
                progress_tokens: requests.iter().filter_map(|r| r.progress_token.clone()).collect(),
                is_get: false,
            },
        );
        state.last_active = Instant::now();
        Ok(PostStream { rx })
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
                if stream.is_get || stream.owed > 0 {
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
                state.streams.insert(
                    number,
                    Stream {
                        tx: Some(tx),
                        history: VecDeque::new(),
                        history_bytes: 0,
                        next_seq: 1,
                        owed: 0,
                        json: false,
                        progress_tokens: Vec::new(),
                        is_get: true,
                    },
                );
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

    /// Routes one message from the relay.
    pub(crate) fn route(&self, message: &Bytes) {
        let mut state = self.state();
        if state.closed {
            return;
        }
        let peek = Peek::of_relayed(message).unwrap_or_default();
        if peek.is_response() {
            let id = peek.id.unwrap_or_default();
            match state.waiting.remove(&id) {
                Some(number) => {
                    if state.waiting.is_empty() {
                        // Idle from the last answer on, not from the request (a server
                        // that took long to answer initialize does not shorten the wait).
                        state.last_active = Instant::now();
                    }
                    self.push(&mut state, number, message);
                    if let Some(stream) = state.streams.get_mut(&number) {
                        stream.owed = stream.owed.saturating_sub(1);
                        if stream.owed == 0 {
                            // The client has every answer: end the response. Its history
                            // stays until the stream is gone, for a client that lost the end.
                            stream.tx = None;
                            if stream.json || self.replay_events == 0 {
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
                    }
                }
                None => {
                    tracing::debug!(target: "aml_mcp_http", "an answer to {id} that no request waits for")
                }
            }
            return;
        }
        let target = peek
            .progress_token
            .as_ref()
            .and_then(|t| {
                state
                    .streams
                    .iter()
                    .find(|(_, s)| s.owed > 0 && !s.json && s.progress_tokens.contains(t))
                    .map(|(n, _)| *n)
            })
            .or_else(|| {
                state
                    .streams
                    .iter()
                    .filter(|(_, s)| s.owed > 0 && !s.json)
                    .map(|(n, _)| *n)
                    .max()
            })
            .or(state.get_stream);
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

    /// The relay ended: every request still waiting gets an error answer, then the streams end.
    pub(crate) fn relay_ended(&self) {
        self.end(
            aml_mcp::relay::UPSTREAM_GONE,
            "the gate's session with the server ended before the server answered",
        );
    }

    /// Ends the session with an error answer (`code`, `why`) to every request still waiting,
    /// so that no POST's stream ends without the answer it waits for.
    pub(crate) fn end(&self, code: i64, why: &str) {
        self.to_relay.lock().unwrap_or_else(|e| e.into_inner()).take();
        let waiting: Vec<String> = self.state().waiting.keys().cloned().collect();
        for id in waiting {
            self.route(&message::error(Some(&id), code, why));
        }
        self.close();
    }
}

/// Every open session, by id.
pub(crate) type Sessions = Arc<Mutex<HashMap<String, Arc<Session>>>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn session(replay: usize) -> Session {
        let (tx, _rx) = mpsc::channel(1);
        let client = Client::Address([127, 0, 0, 1].into());
        Session::new("s".into(), "session 1".into(), client, tx, replay)
    }

    fn request(id: &str, token: Option<&str>) -> Peek {
        Peek {
            id: Some(id.into()),
            method: Some("tools/call".into()),
            progress_token: token.map(str::to_owned),
            bad_id: false,
            tool: None,
        }
    }

    fn kept(session: &Session, number: u64) -> (usize, usize) {
        let state = session.state();
        let stream = &state.streams[&number];
        (stream.history.len(), stream.history_bytes)
    }

    #[test]
    fn progress_goes_to_its_request_and_the_history_stays_bounded() {
        let s = session(8);
        let mut a = s
            .open_post(&[request("1", Some("\"a\""))], false, 4)
            .ok()
            .unwrap();
        let mut b = s
            .open_post(&[request("2", Some("\"b\""))], false, 4)
            .ok()
            .unwrap();
        s.route(&Bytes::from_static(
            br#"{"method":"notifications/progress","params":{"progressToken":"a"}}"#,
        ));
        assert!(a.rx.try_recv().unwrap().ends_with(b"\"a\"}}\n\n"));
        assert!(b.rx.try_recv().is_err());
        // Unrelated server messages go to the newest open POST stream.
        for _ in 0..20 {
            s.route(&Bytes::from_static(
                br#"{"method":"notifications/message","params":{}}"#,
            ));
        }
        assert_eq!(kept(&s, 2).0, 8, "at most replay_events kept");
        let big = Bytes::from(format!(
            "{{\"method\":\"m\",\"params\":{{\"x\":\"{}\"}}}}",
            "x".repeat(400_000)
        ));
        for _ in 0..5 {
            s.route(&big);
        }
        assert!(kept(&s, 2).1 <= KEPT_BYTES, "{:?}", kept(&s, 2));
        // Too many requests at once, and an id already waiting.
        assert!(matches!(
            s.open_post(
                &[request("3", None), request("4", None), request("5", None)],
                false,
                4
            ),
            Err(Refused::TooManyCalls)
        ));
        assert!(matches!(
            s.open_post(&[request("1", None)], false, 4),
            Err(Refused::DuplicateId(_))
        ));
        // The answer ends its stream.
        s.route(&Bytes::from_static(br#"{"id":1,"result":{}}"#));
        assert!(a.rx.try_recv().unwrap().windows(7).any(|w| w == b"\"id\":1,"));
        assert!(matches!(
            a.rx.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
    }

    /// A host that keeps more events than a stream's live queue holds gets every one of them
    /// back on a resume, not the first queue's worth.
    #[test]
    fn a_resume_replays_every_kept_event() {
        let kept_events = STREAM_QUEUE + 44;
        let s = session(kept_events);
        let live = s.open_get(None).unwrap();
        let number = s.state().get_stream.unwrap();
        for i in 0..kept_events {
            let note = format!(r#"{{"method":"notifications/message","params":{{"n":{i}}}}}"#);
            s.route(&Bytes::from(note));
        }
        drop(live);
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
