//! Protocol 2026-07-28 over HTTP: no sessions, one request per POST. All such requests of
//! one caller (one bearer token's name) share one relay (a "link", made when the caller's
//! first one comes and again after its relay ends), so a relay's calls are one caller's. Each
//! POST is an endpoint of the link's relay (ADR 031): the relay gives its request an id and
//! progress token of its own, sends the answer and the request's notifications to that
//! endpoint alone, and cancels what the POST asked when it closes unanswered.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use aml_mcp::relay::{Client, EndpointEvent, EndpointId, Inbound, ToEndpoint};
use tokio::sync::mpsc;

use super::SessionInfo;
use crate::param_headers::ToolHeaders;

/// Messages queued for one streaming POST before its notifications are dropped.
const STREAM_QUEUE: usize = 64;
/// Endpoint events queued for a link's relay.
const LINK_QUEUE: usize = 1024;

/// The stateless path's state, shared by every request handler.
#[derive(Debug, Default)]
pub(crate) struct Stateless {
    /// One link per caller (the token's name; `None` without tokens), so each relay's
    /// calls are one caller's.
    links_by_caller: Mutex<HashMap<Option<String>, Arc<Link>>>,
    links: AtomicU64,
    /// What each tool declares as `Mcp-Param-*` headers, from the listings the links carry.
    pub(crate) param_headers: ToolHeaders,
}

/// One relay for stateless requests.
#[derive(Debug)]
pub(crate) struct Link {
    to_relay: Mutex<Option<mpsc::Sender<EndpointEvent>>>,
    waiting: Mutex<Waiting>,
    /// The last endpoint given (the relay's standing endpoint is 0, which a link has not).
    last_endpoint: AtomicU64,
    home: Weak<Stateless>,
    caller: Option<String>,
}

#[derive(Debug, Default)]
struct Waiting {
    /// Requests waiting for their answer.
    count: usize,
    /// When a request last came: the idlest link gives way to a new caller's at the cap.
    last_used: Option<std::time::Instant>,
}

/// Why a request could not be sent.
pub(crate) enum Refused {
    /// The limit of requests waiting at once.
    Full,
    /// The link's relay has ended.
    Closed,
}

/// A request sent: where its answer and notifications come, and what closes its endpoint
/// (cancelling it, if unanswered) when dropped.
pub(crate) struct Asked {
    pub(crate) rx: mpsc::Receiver<ToEndpoint>,
    pub(crate) guard: EndpointGuard,
}

/// Dropped once the POST is done (answered, or its client went away): the relay closes the
/// endpoint, and cancels its request if it was not answered, as closing the stream means in
/// 2026-07-28.
pub(crate) struct EndpointGuard {
    link: Arc<Link>,
    endpoint: EndpointId,
    to_relay: mpsc::Sender<EndpointEvent>,
}

impl Drop for EndpointGuard {
    fn drop(&mut self) {
        self.link.lock().count -= 1;
        let close = EndpointEvent::Close {
            endpoint: self.endpoint,
        };
        match self.to_relay.try_send(close) {
            Err(mpsc::error::TrySendError::Full(close)) => {
                // The relay is behind: the close waits its turn rather than be lost.
                let to_relay = self.to_relay.clone();
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => drop(runtime.spawn(async move { to_relay.send(close).await })),
                    Err(_) => {
                        tracing::warn!(target: "aml_mcp_http", endpoint = self.endpoint, "a stateless request's end could not be queued; the server is not told")
                    }
                }
            }
            // Sent, or the relay has ended and nothing runs any more.
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

/// A new link's relay client side and what the host learns of it.
pub(crate) type Opened = (Client, SessionInfo);

/// Every caller's link is busy and there are `max` of them: a new caller's request waits
/// for none of them (503).
#[derive(Debug)]
pub(crate) struct TooManyLinks;

impl Stateless {
    /// The caller's current link, or a new one: then also the client side and info for the
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
        if let Some(link) = links.get(caller).filter(|l| !l.closed()) {
            return Ok((link.clone(), None));
        }
        links.retain(|_, link| !link.closed());
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
                    (waiting.count == 0).then(|| (waiting.last_used, who.clone()))
                })
                .min_by_key(|(used, _)| *used)
                .map(|(_, who)| who);
            let Some(who) = idlest else {
                return busy(peer, links.len());
            };
            if let Some(link) = links.remove(&who) {
                tracing::info!(target: "aml_mcp_http", "an idle 2026-07-28 relay is closed for another caller's");
                link.to_relay.lock().unwrap_or_else(|e| e.into_inner()).take();
            }
        }
        let (to_relay, events) = mpsc::channel(LINK_QUEUE);
        let link = Arc::new(Link {
            to_relay: Mutex::new(Some(to_relay)),
            waiting: Mutex::new(Waiting::default()),
            last_endpoint: AtomicU64::new(0),
            home: Arc::downgrade(self),
            caller: caller.clone(),
        });
        links.insert(caller.clone(), link.clone());
        let number = self.links.fetch_add(1, Ordering::Relaxed) + 1;
        let info = SessionInfo {
            id: format!("stateless-{number}"),
            name: format!("stateless-{number}"),
            peer,
            stateless: true,
            caller: caller.clone(),
        };
        tracing::info!(target: "aml_mcp_http", %peer, link = %info.id, "stateless (2026-07-28) relay opened");
        Ok((link, Some((Client::Endpoints(events), info))))
    }

    /// How many links are open (each has a relay and a server of its own).
    pub(crate) fn open(&self) -> usize {
        let links = self.links_by_caller.lock().unwrap_or_else(|e| e.into_inner());
        links.values().filter(|link| !link.closed()).count()
    }

    /// Ends every link (the front is closing): each relay sees its client leave once the
    /// requests it is answering are done.
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

    fn sender(&self) -> Option<mpsc::Sender<EndpointEvent>> {
        self.to_relay.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether the link takes no more requests (closed for another caller's, or its relay
    /// has ended).
    fn closed(&self) -> bool {
        self.to_relay
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_none_or(|tx| tx.is_closed())
    }

    fn next_endpoint(&self) -> EndpointId {
        self.last_endpoint.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Sends a request on an endpoint of its own (`stream`: it takes notifications besides
    /// its answer); at most `max` wait at once.
    pub(crate) async fn ask(
        self: &Arc<Self>,
        request: Inbound,
        stream: bool,
        max: usize,
    ) -> Result<Asked, Refused> {
        let to_relay = self
            .sender()
            .filter(|tx| !tx.is_closed())
            .ok_or(Refused::Closed)?;
        {
            let mut waiting = self.lock();
            if waiting.count >= max {
                return Err(Refused::Full);
            }
            waiting.count += 1;
            waiting.last_used = Some(std::time::Instant::now());
        }
        let endpoint = self.next_endpoint();
        // From here the endpoint is closed whatever happens, even if this future is dropped.
        let guard = EndpointGuard {
            link: self.clone(),
            endpoint,
            to_relay: to_relay.clone(),
        };
        let (to, rx) = mpsc::channel(if stream { STREAM_QUEUE } else { 1 });
        let open = EndpointEvent::Open { endpoint, to, stream };
        let message = EndpointEvent::Message {
            endpoint,
            inbound: request,
        };
        if to_relay.send(open).await.is_err() || to_relay.send(message).await.is_err() {
            self.finish();
            return Err(Refused::Closed);
        }
        Ok(Asked { rx, guard })
    }

    /// Passes a message that expects no answer (a request without an id, which the relay
    /// drops and records). False if the relay has ended.
    pub(crate) async fn tell(&self, message: Inbound) -> bool {
        let event = EndpointEvent::Message {
            endpoint: self.next_endpoint(),
            inbound: message,
        };
        let sent = match self.sender() {
            Some(tx) => tx.send(event).await.is_ok(),
            None => false,
        };
        if !sent {
            self.finish();
        }
        sent
    }

    /// No more requests: the front stops handing this link out.
    fn finish(&self) {
        self.to_relay.lock().unwrap_or_else(|e| e.into_inner()).take();
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
}

#[cfg(test)]
#[path = "stateless_tests.rs"]
mod tests;
