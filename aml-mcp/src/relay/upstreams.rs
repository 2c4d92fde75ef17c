//! The engine's side of its servers' connections (ADR 033): what each server sends, and
//! when each ends, read as one stream of events by server, without a task per server.

use std::future::{poll_fn, Future};
use std::task::Poll;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::frame::Inbound;
use super::machine::ServerId;
use super::{Connection, Upstream};

/// What happened at one server.
pub(crate) enum UpstreamEvent {
    /// It sent a message.
    Message(ServerId, Inbound),
    /// Its output ended (it closed it, or stopped reading its input).
    Closed(ServerId),
    /// Its process exited, with its status (or why it is unknown).
    Exited(ServerId, String),
}

/// The servers' receiving ends, each until it has ended; and their sending ends.
pub(crate) struct Upstreams {
    incoming: Vec<Option<mpsc::Receiver<Inbound>>>,
    exited: Vec<Option<oneshot::Receiver<String>>>,
    /// Where the next look begins, so that a busy server does not starve the others.
    next: usize,
}

impl Upstreams {
    /// Splits the servers' connections into what the engine reads and where it writes.
    pub(crate) fn new(servers: Vec<Upstream>) -> (Upstreams, Vec<mpsc::Sender<Bytes>>) {
        let mut incoming = Vec::with_capacity(servers.len());
        let mut exited = Vec::with_capacity(servers.len());
        let mut outgoing = Vec::with_capacity(servers.len());
        for Upstream {
            connection: Connection {
                incoming: i,
                outgoing: o,
            },
            exited: e,
        } in servers
        {
            incoming.push(Some(i));
            exited.push(Some(e));
            outgoing.push(o);
        }
        let upstreams = Upstreams {
            incoming,
            exited,
            next: 0,
        };
        (upstreams, outgoing)
    }

    /// Whether any server may still send or end.
    pub(crate) fn active(&self) -> bool {
        self.incoming.iter().any(Option::is_some) || self.exited.iter().any(Option::is_some)
    }

    /// The next event at any server (pending forever once none is active).
    pub(crate) async fn next(&mut self) -> UpstreamEvent {
        poll_fn(|cx| {
            let count = self.incoming.len();
            for turn in 0..count {
                let server = (self.next + turn) % count;
                if let Some(exit) = &mut self.exited[server] {
                    if let Poll::Ready(status) = std::pin::Pin::new(exit).poll(cx) {
                        self.exited[server] = None;
                        let status = status.unwrap_or_else(|_| "status unknown".into());
                        self.next = server + 1;
                        return Poll::Ready(UpstreamEvent::Exited(server, status));
                    }
                }
                if let Some(incoming) = &mut self.incoming[server] {
                    if let Poll::Ready(received) = incoming.poll_recv(cx) {
                        self.next = server + 1;
                        return Poll::Ready(match received {
                            Some(inbound) => UpstreamEvent::Message(server, inbound),
                            None => {
                                self.incoming[server] = None;
                                UpstreamEvent::Closed(server)
                            }
                        });
                    }
                }
            }
            Poll::Pending
        })
        .await
    }
}
