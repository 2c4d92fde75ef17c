//! The live stream (`GET /api/v1/events`): server-sent events of every change of the board.
//!
//! A stream starts with `snapshot` (everything pending, and the sequence number it is
//! current at), then one event per change, in order: `pending` (a proposal arrived) and
//! `outcome` (one left: approved, denied, expired, withdrawn). Each carries `seq`, one more
//! than the change before; a client that sees a gap asks for a snapshot again. A stream
//! that falls behind (the peer reads too slowly) gets a fresh `snapshot`; one told to close
//! gets `bye`. With `?view=page` each event also carries the page's HTML for it.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Bytes, Frame, SizeHint};
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::admission::StreamSlot;
use super::board::Board;
use super::{api, render, State};
use crate::history::HistoryEntry;

/// Changes kept for a stream that is behind; past that it gets a snapshot instead.
pub(super) const BACKLOG: usize = 64;
/// A comment line this often keeps idle streams open through proxies and shows a dead peer.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// A stream whose peer reads nothing for this long is closed.
const STALL: Duration = Duration::from_secs(30);
/// How long a browser waits before it reconnects a stream that ended.
const RETRY_MS: u64 = 2000;

/// Who reads a stream: an integration (JSON only), or the page (JSON and its HTML).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum View {
    Api,
    Page,
}

/// One change, ready to send in either view.
pub(super) struct Event {
    seq: u64,
    name: &'static str,
    api: String,
    page: String,
}

impl Event {
    fn new(seq: u64, name: &'static str, api: &Value, page: &Value) -> Event {
        Event {
            seq,
            name,
            api: api.to_string(),
            page: page.to_string(),
        }
    }

    fn frame(&self, view: View) -> Bytes {
        let data = match view {
            View::Api => &self.api,
            View::Page => &self.page,
        };
        Bytes::from(format!(
            "id: {}\nevent: {}\ndata: {data}\n\n",
            self.seq, self.name
        ))
    }
}

/// The event for request `grant_id`, just put on the board.
pub(super) fn pending(state: &State, board: &Board, grant_id: &str, now_ms: i64) -> Event {
    let seq = board.seq();
    let Some(entry) = board.get(grant_id) else {
        let nothing = json!({"seq": seq});
        return Event::new(seq, "pending", &nothing, &nothing);
    };
    let digest = entry.pending.proposal.digest();
    let group = board.group_of(digest);
    // The page's view names the request and brings its HTML; the proposal itself is in
    // that HTML, not twice more.
    let page = json!({
        "seq": seq, "now_ms": now_ms,
        "pending": {"grant_id": entry.pending.grant_id, "proposal_sha256": digest.to_string(),
                    "expires_at_ms": entry.pending.expires_at_ms},
        "member_html": render::member(entry, &state.token, now_ms),
        "group_html": render::group(&group, &state.token, now_ms),
    });
    let api = json!({"seq": seq, "now_ms": now_ms, "pending": api::pending_value(entry)});
    Event::new(seq, "pending", &api, &page)
}

/// The event for `outcome`: one request left the board.
pub(super) fn outcome(board: &Board, outcome: &HistoryEntry) -> Event {
    let seq = board.seq();
    let api = json!({"seq": seq, "outcome": api::history_value(outcome)});
    let mut page = api.clone();
    page["history_html"] = Value::String(render::history_row(outcome));
    Event::new(seq, "outcome", &api, &page)
}

/// Everything pending now, in `view`.
pub(super) fn snapshot(state: &State, board: &Board, view: View) -> Value {
    let now = state.clock.now_ms();
    match view {
        View::Api => json!({
            "seq": board.seq(),
            "now_ms": now,
            "pending": board.in_arrival_order().map(api::pending_value).collect::<Vec<_>>(),
        }),
        View::Page => json!({
            "seq": board.seq(),
            "now_ms": now,
            "count": board.len(),
            "html": render::groups(board, &state.token, now),
        }),
    }
}

/// A snapshot and a subscription to every change after it (taken together, under the
/// board's lock, so nothing falls between them).
fn subscribe(state: &State, view: View) -> (Bytes, broadcast::Receiver<Arc<Event>>) {
    let board = state.board();
    let snapshot = snapshot(state, &board, view);
    let frame = format!("id: {}\nevent: snapshot\ndata: {snapshot}\n\n", board.seq());
    (Bytes::from(frame), state.events.subscribe())
}

/// The body of one stream: frames from its task.
pub(super) struct EventBody {
    frames: mpsc::Receiver<Bytes>,
}

impl hyper::body::Body for EventBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.get_mut()
            .frames
            .poll_recv(cx)
            .map(|frame| frame.map(|bytes| Ok(Frame::data(bytes))))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// Starts a stream in `view` holding `slot` until it ends: at shutdown, when `closing`
/// says it must make room, when its peer goes away or stops reading.
pub(super) fn start(
    state: Arc<State>,
    view: View,
    slot: StreamSlot,
    closing: oneshot::Receiver<()>,
) -> EventBody {
    let (frames, body) = mpsc::channel(8);
    tokio::spawn(run(state, view, slot, closing, frames));
    EventBody { frames: body }
}

async fn run(
    state: Arc<State>,
    view: View,
    _slot: StreamSlot,
    mut closing: oneshot::Receiver<()>,
    frames: mpsc::Sender<Bytes>,
) {
    let stopped = until_stopped(state.stopped.clone());
    tokio::pin!(stopped);
    let send = |frame: Bytes| {
        let frames = frames.clone();
        async move { matches!(tokio::time::timeout(STALL, frames.send(frame)).await, Ok(Ok(()))) }
    };
    let (first, mut changes) = subscribe(&state, view);
    if !send(Bytes::from(format!("retry: {RETRY_MS}\n\n"))).await || !send(first).await {
        return;
    }
    let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    loop {
        let frame = tokio::select! {
            biased;
            () = &mut stopped => {
                let _ = send(bye("the approval page stopped")).await;
                return;
            }
            _ = &mut closing => {
                let _ = send(bye("too many live streams were open; this one was closed to make room")).await;
                return;
            }
            change = changes.recv() => match change {
                Ok(event) => event.frame(view),
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let (fresh, resubscribed) = subscribe(&state, view);
                    changes = resubscribed;
                    fresh
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = beat.tick() => Bytes::from_static(b": keep-alive\n\n"),
        };
        if !send(frame).await {
            return;
        }
    }
}

/// Returns once the page stops (or its handle is gone).
async fn until_stopped(mut stopped: tokio::sync::watch::Receiver<bool>) {
    while !*stopped.borrow_and_update() {
        if stopped.changed().await.is_err() {
            return;
        }
    }
}

fn bye(why: &str) -> Bytes {
    Bytes::from(format!("event: bye\ndata: {}\n\n", json!({"why": why})))
}
