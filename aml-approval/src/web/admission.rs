//! Who gets a connection: connections that have not shown the page's token are kept apart
//! from those that have (ADR 011).
//!
//! - An **unproven** connection (every connection, until it shows the token) is admitted
//!   always; when the unproven pool is full, its oldest member is closed to make room —
//!   the oldest that has not already sent the token, looking at what it sent before the
//!   page read it. A flood of connections without the token therefore churns only its own
//!   connections: the approver's connection is never refused, and once its request has
//!   arrived it is not closed, however long the page takes to read it.
//! - Showing the token moves a connection to the **proven** pool, a semaphore of its own;
//!   connections without the token can never take those slots.
//! - A proven connection that becomes a live event stream gives its proven slot back and
//!   takes one of the **streams** ([`Streams`]): tabs left open all day never use up the
//!   slots the approver's page loads and decisions need. At the streams' cap the oldest
//!   stream is told to close.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use subtle::ConstantTimeEq;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

/// How much of a waiting connection's buffered request is looked at for the token.
const PEEK: usize = 8 * 1024;

/// The connections that have not shown the token yet, oldest first.
pub(super) struct Unproven {
    cap: usize,
    token: Vec<u8>,
    inner: Mutex<Pool>,
}

#[derive(Default)]
struct Pool {
    next_id: u64,
    waiting: BTreeMap<u64, Waiting>,
    peeked: Vec<u8>,
}

/// One connection waiting to show the token.
struct Waiting {
    /// Its "close now" signal; dropped (not sent) once it is proven.
    close: oneshot::Sender<()>,
    /// A second handle on its socket, to look at what it has sent before its own task has
    /// read it (`None` where that is not available).
    socket: Option<std::net::TcpStream>,
    /// Resolves once its task has ended and its socket is closed.
    ended: oneshot::Receiver<()>,
}

impl Waiting {
    /// Whether what the peer has sent, not yet read by the page, already carries the token
    /// (`t=TOKEN` in the URL, a `Referer` or a form body, or `Bearer TOKEN` in an
    /// `Authorization` header): then it is the approver's, and only the page's scheduling has
    /// kept it from being proven.
    fn has_sent_token(&self, token: &[u8], buf: &mut Vec<u8>) -> bool {
        let Some(socket) = &self.socket else {
            return false;
        };
        buf.resize(PEEK, 0);
        let Ok(n) = socket.peek(buf) else {
            return false;
        };
        let sent = &buf[..n];
        let mut found = subtle::Choice::from(0);
        for marker in [&b"t="[..], b"Bearer "] {
            for at in (0..=sent.len().saturating_sub(marker.len())).filter(|&i| sent[i..].starts_with(marker))
            {
                if let Some(candidate) = sent.get(at + marker.len()..at + marker.len() + token.len()) {
                    found |= candidate.ct_eq(token);
                }
            }
        }
        bool::from(found)
    }
}

/// A connection just admitted.
pub(super) struct Admitted {
    /// Its place in the pool.
    pub(super) id: u64,
    /// Resolves `Ok` when the connection is to close (it was shed), `Err` once it has been
    /// proven (its sender was dropped).
    pub(super) close: oneshot::Receiver<()>,
    /// Whether another connection was shed to make room for it.
    pub(super) made_room: bool,
    /// Held by the connection's task until its socket is closed; dropping it tells the
    /// accept loop that the descriptor is free.
    pub(super) alive: oneshot::Sender<()>,
    /// For each connection shed to make room: resolves once its socket is closed. The
    /// accept loop waits for these before accepting more, so a flood cannot outrun the
    /// tasks that close what it displaced (and exhaust the descriptors the cap protects).
    pub(super) shed: Vec<oneshot::Receiver<()>>,
}

impl Unproven {
    /// A pool of at most `cap` (at least 1) connections, for a page whose token is `token`.
    pub(super) fn new(cap: usize, token: &str) -> Self {
        Unproven {
            cap: cap.max(1),
            token: token.as_bytes().to_vec(),
            inner: Mutex::default(),
        }
    }

    fn pool(&self) -> MutexGuard<'_, Pool> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many connections wait to show the token.
    pub(super) fn len(&self) -> usize {
        self.pool().waiting.len()
    }

    /// Admits a new connection (`socket`: a second handle on it, if one could be made). If
    /// the pool is full, its oldest member that has not already sent the token is told to
    /// close (the oldest of all, if every one has).
    pub(super) fn admit(&self, socket: Option<std::net::TcpStream>) -> Admitted {
        let (close, rx) = oneshot::channel();
        let (alive, ended) = oneshot::channel();
        let mut pool = self.pool();
        let Pool { waiting, peeked, .. } = &mut *pool;
        let mut made_room = false;
        let mut shed = Vec::new();
        while waiting.len() >= self.cap {
            let victim = waiting
                .iter()
                .find(|(_, w)| !w.has_sent_token(&self.token, peeked))
                .or_else(|| waiting.iter().next())
                .map(|(id, _)| *id);
            if let Some(victim) = victim.and_then(|id| waiting.remove(&id)) {
                made_room |= victim.close.send(()).is_ok();
                shed.push(victim.ended);
            }
        }
        let id = pool.next_id;
        pool.next_id += 1;
        pool.waiting.insert(id, Waiting { close, socket, ended });
        Admitted {
            id,
            close: rx,
            made_room,
            alive,
            shed,
        }
    }

    /// Takes `id` out of the pool (if it is still there).
    fn leave(&self, id: u64) {
        self.pool().waiting.remove(&id);
    }

    #[cfg(test)]
    fn contains(&self, id: u64) -> bool {
        self.pool().waiting.contains_key(&id)
    }
}

/// Every proven slot is taken (the approver has that many requests open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Busy;

/// One connection's place: unproven until [`Admission::prove`], then a proven slot, held
/// until the connection (and with it this value) is dropped, or given back when the
/// connection becomes an event stream ([`Admission::become_stream`]).
pub(super) struct Admission {
    id: u64,
    unproven: Arc<Unproven>,
    proven: Arc<Semaphore>,
    permit: Mutex<Option<OwnedSemaphorePermit>>,
    streaming: AtomicBool,
}

impl Admission {
    pub(super) fn new(id: u64, unproven: Arc<Unproven>, proven: Arc<Semaphore>) -> Self {
        Admission {
            id,
            unproven,
            proven,
            permit: Mutex::new(None),
            streaming: AtomicBool::new(false),
        }
    }

    fn permit(&self) -> MutexGuard<'_, Option<OwnedSemaphorePermit>> {
        self.permit.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection showed the token: it takes a proven slot and leaves the unproven
    /// pool, so it is no longer shed or cut for want of the token. A connection the pool
    /// chose to shed while its request was being read (after the pool last looked at it)
    /// is served all the same: it has shown the token.
    pub(super) fn prove(&self) -> Result<(), Busy> {
        let mut permit = self.permit();
        if permit.is_none() {
            *permit = Some(Arc::clone(&self.proven).try_acquire_owned().map_err(|_| Busy)?);
            self.unproven.leave(self.id);
        }
        Ok(())
    }

    /// Whether it has shown the token.
    pub(super) fn is_proven(&self) -> bool {
        self.permit().is_some() || self.is_streaming()
    }

    /// The proven connection now serves a live stream: its proven slot is given back (the
    /// stream holds a [`StreamSlot`] instead), and no connection deadline applies to it.
    pub(super) fn become_stream(&self) {
        let mut permit = self.permit();
        if permit.take().is_some() {
            self.streaming.store(true, Ordering::Release);
        }
    }

    /// Whether it serves a live stream.
    pub(super) fn is_streaming(&self) -> bool {
        self.streaming.load(Ordering::Acquire)
    }
}

/// The live event streams open now, oldest first; at most `cap`.
pub(super) struct Streams {
    cap: usize,
    inner: Mutex<(u64, BTreeMap<u64, oneshot::Sender<()>>)>,
}

/// One stream's place, given back when it is dropped.
pub(super) struct StreamSlot {
    id: u64,
    streams: Arc<Streams>,
}

impl Streams {
    /// Room for `cap` (at least 1) streams.
    pub(super) fn new(cap: usize) -> Self {
        Streams {
            cap: cap.max(1),
            inner: Mutex::default(),
        }
    }

    fn inner(&self) -> MutexGuard<'_, (u64, BTreeMap<u64, oneshot::Sender<()>>)> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many streams are open.
    pub(super) fn len(&self) -> usize {
        self.inner().1.len()
    }

    /// A place for one more stream, and the signal that tells it to close; at the cap, the
    /// oldest stream is told to close first (the newest is the tab the person looks at).
    pub(super) fn open(self: &Arc<Self>) -> (StreamSlot, oneshot::Receiver<()>) {
        let (close, closing) = oneshot::channel();
        let mut inner = self.inner();
        let (next_id, open) = &mut *inner;
        while open.len() >= self.cap {
            if let Some((_, oldest)) = open.pop_first() {
                let _ = oldest.send(());
            }
        }
        let id = *next_id;
        *next_id += 1;
        open.insert(id, close);
        let slot = StreamSlot {
            id,
            streams: Arc::clone(self),
        };
        (slot, closing)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.streams.inner().1.remove(&self.id);
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.unproven.leave(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_unproven_connection_is_shed_and_proven_ones_are_kept_apart() {
        let unproven = Arc::new(Unproven::new(2, "secret"));
        let proven = Arc::new(Semaphore::new(1));
        let admission = |a: &Admitted| Admission::new(a.id, Arc::clone(&unproven), Arc::clone(&proven));
        let mut a = unproven.admit(None);
        let mut b = unproven.admit(None);
        let b_admission = admission(&b);
        let mut c = unproven.admit(None);
        assert!(c.made_room, "the pool was full");
        assert_eq!(a.close.try_recv(), Ok(()), "the oldest is told to close");
        let [mut a_ended]: [_; 1] = std::mem::take(&mut c.shed).try_into().unwrap();
        assert_eq!(a_ended.try_recv(), Err(oneshot::error::TryRecvError::Empty));
        drop(std::mem::replace(&mut a.alive, oneshot::channel().0));
        assert!(
            matches!(a_ended.try_recv(), Err(oneshot::error::TryRecvError::Closed)),
            "the accept loop learns when the shed connection is gone"
        );
        assert!(b.close.try_recv().is_err() && c.close.try_recv().is_err());
        assert_eq!(b_admission.prove(), Ok(()));
        assert!(b_admission.is_proven() && !unproven.contains(b.id));
        assert!(
            matches!(b.close.try_recv(), Err(oneshot::error::TryRecvError::Closed)),
            "proven: its close signal is gone"
        );
        let c_admission = admission(&c);
        assert_eq!(c_admission.prove(), Err(Busy), "one proven slot, taken");
        assert!(!c_admission.is_proven() && unproven.contains(c.id));
        // Two new unproven connections fill the pool again without touching b's slot.
        let _d = unproven.admit(None);
        let _e = unproven.admit(None);
        assert!(b_admission.is_proven());
        assert_eq!(proven.available_permits(), 0);
        drop(b_admission);
        assert_eq!(
            proven.available_permits(),
            1,
            "the slot is freed with the connection"
        );
        assert_eq!(unproven.len(), 2);
        // Shed while its request was being read, a connection that shows the token is
        // still served.
        drop(c_admission);
        let shed = admission(&a);
        assert!(!unproven.contains(a.id));
        assert_eq!(shed.prove(), Ok(()));
    }

    /// A stream gives its proven slot back; at the streams' cap the oldest is told to close.
    #[test]
    fn a_stream_gives_its_proven_slot_back_and_the_oldest_stream_makes_room() {
        let unproven = Arc::new(Unproven::new(4, "secret"));
        let proven = Arc::new(Semaphore::new(1));
        let a = unproven.admit(None);
        let admission = Admission::new(a.id, Arc::clone(&unproven), Arc::clone(&proven));
        admission.prove().unwrap();
        assert_eq!(proven.available_permits(), 0);
        admission.become_stream();
        assert!(admission.is_streaming() && admission.is_proven());
        assert_eq!(
            proven.available_permits(),
            1,
            "the slot is free for page loads and decisions"
        );
        let streams = Arc::new(Streams::new(2));
        let (first, mut first_closing) = streams.open();
        let (_second, mut second_closing) = streams.open();
        let (_third, _) = streams.open();
        assert_eq!(first_closing.try_recv(), Ok(()), "the oldest makes room");
        assert!(second_closing.try_recv().is_err());
        assert_eq!(streams.len(), 2);
        drop(first);
        assert_eq!(streams.len(), 2, "a slot already given up is not counted twice");
    }

    /// A connection whose request, still unread by the page, carries the token is passed
    /// over when room is made; one that sent something else is not.
    #[test]
    fn a_connection_that_has_sent_the_token_is_not_shed_before_it_is_read() {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let connect = |request: &[u8]| {
            let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            client.write_all(request).unwrap();
            let (server, _) = listener.accept().unwrap();
            // Wait (bounded) until the bytes are there to be looked at.
            server
                .set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            server.peek(&mut [0u8; 1]).unwrap();
            (client, server)
        };
        let unproven = Unproven::new(3, "c0ffee");
        let (_approver, approver) = connect(b"GET /?t=c0ffee HTTP/1.1\r\nHost: x\r\n\r\n");
        let (_client, client) =
            connect(b"GET /api/v1/pending HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer c0ffee\r\n\r\n");
        let (_other, other) = connect(b"GET /?t=c0ffef HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut first = unproven.admit(Some(approver));
        let mut bearer = unproven.admit(Some(client));
        let mut second = unproven.admit(Some(other));
        let third = unproven.admit(None);
        assert!(third.made_room);
        assert!(first.close.try_recv().is_err(), "the approver's connection stays");
        assert!(
            bearer.close.try_recv().is_err(),
            "so does an API client's with the token"
        );
        assert_eq!(second.close.try_recv(), Ok(()), "the wrong token is shed");
        assert!(unproven.contains(first.id) && unproven.contains(bearer.id) && unproven.contains(third.id));
    }
}
