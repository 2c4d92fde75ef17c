//! The front's connection cap, with room kept for clients that proved who they are.
//!
//! A client's headers (and so its token) arrive only after its connection is open, so a cap
//! alone lets anyone who can reach the port fill it with connections that never finish a
//! request. Here every connection starts *unproven*; it becomes *proven* once one of its
//! requests passes the front's checks (Origin, bearer token). Unproven connections may hold at
//! most three quarters of the cap; when a new connection would pass that share (or the whole
//! cap), the oldest unproven connection is closed to make room. A real client sends its
//! headers at once, so it is proven long before a flood of new connections reaches it, and a
//! proven connection is never closed for room: only the whole cap filled with proven
//! connections refuses a new one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// Every open connection of one front.
#[derive(Debug)]
pub(crate) struct Connections {
    max: usize,
    max_unproven: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// Unproven connections, oldest first, with what closes each.
    unproven: BTreeMap<u64, oneshot::Sender<()>>,
    proven: usize,
}

/// Why a connection was not taken.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Full {
    pub(crate) proven: usize,
}

/// One admitted connection's place; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct Slot {
    id: u64,
    proven: AtomicBool,
    connections: Arc<Connections>,
}

impl Connections {
    /// A cap of `max` connections (at least 1), three quarters of them (at least 1) for
    /// unproven ones.
    pub(crate) fn new(max: usize) -> Arc<Connections> {
        let max = max.max(1);
        Arc::new(Connections {
            max,
            max_unproven: (max - max / 4).max(1),
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a new connection, closing the oldest unproven one if that is what makes room.
    /// The receiver gets `()` when this connection is the one closed for room (and an error,
    /// to be ignored, once it is proven).
    pub(crate) fn admit(self: &Arc<Self>) -> Result<(Slot, oneshot::Receiver<()>), Full> {
        let mut state = self.state();
        let open = state.unproven.len() + state.proven;
        if state.unproven.len() >= self.max_unproven || open >= self.max {
            let Some((_, oldest)) = state.unproven.pop_first() else {
                return Err(Full { proven: state.proven });
            };
            // Its task closes it (a sender dropped without a send, as on proof, does not).
            let _ = oldest.send(());
        }
        let id = state.next;
        state.next += 1;
        let (close, closed) = oneshot::channel();
        state.unproven.insert(id, close);
        drop(state);
        Ok((
            Slot {
                id,
                proven: AtomicBool::new(false),
                connections: self.clone(),
            },
            closed,
        ))
    }

    /// How many connections are open: (unproven, proven).
    #[cfg(test)]
    fn open(&self) -> (usize, usize) {
        let state = self.state();
        (state.unproven.len(), state.proven)
    }
}

impl Slot {
    /// One of this connection's requests passed the checks: it is never closed for room.
    /// Again on a proven connection: nothing.
    pub(crate) fn prove(&self) {
        let mut state = self.connections.state();
        if state.unproven.remove(&self.id).is_some() {
            state.proven += 1;
            self.proven.store(true, Ordering::Relaxed);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.connections.state();
        // Unproven (or already closed for room: then in neither count), or proven.
        if state.unproven.remove(&self.id).is_none() && self.proven.load(Ordering::Relaxed) {
            state.proven -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unproven_connections_make_room_and_proven_ones_keep_theirs() {
        let connections = Connections::new(4);
        // Three unproven fill their share; the fourth closes the oldest.
        let (first, mut first_closed) = connections.admit().unwrap();
        let (second, second_closed) = connections.admit().unwrap();
        let (third, _) = connections.admit().unwrap();
        assert_eq!(connections.open(), (3, 0));
        assert!(first_closed
            .try_recv()
            .is_err_and(|e| e == oneshot::error::TryRecvError::Empty));
        let (fourth, _) = connections.admit().unwrap();
        assert_eq!(first_closed.try_recv(), Ok(()));
        assert_eq!(connections.open(), (3, 0));
        drop(first);
        assert_eq!(
            connections.open(),
            (3, 0),
            "a slot closed for room counts nowhere"
        );
        // Proven ones are never closed for room; unproven ones still are.
        let mut second_closed = second_closed;
        second.prove();
        second.prove();
        assert_eq!(
            second_closed.try_recv(),
            Err(oneshot::error::TryRecvError::Closed),
            "proof is no signal to close"
        );
        third.prove();
        fourth.prove();
        assert_eq!(connections.open(), (0, 3));
        let (fifth, mut fifth_closed) = connections.admit().unwrap();
        let (_sixth, _) = connections.admit().unwrap();
        assert_eq!(fifth_closed.try_recv(), Ok(()));
        drop(fifth);
        // The whole cap proven: a new connection is refused.
        let (seventh, _) = connections.admit().unwrap();
        seventh.prove();
        assert_eq!(connections.open(), (0, 4));
        assert_eq!(connections.admit().unwrap_err(), Full { proven: 4 });
        drop(second);
        assert_eq!(connections.open(), (0, 3));
        assert!(connections.admit().is_ok());
    }
}
