//! Server-sent events: writing one event, and reading events from a byte stream.

use bytes::{Bytes, BytesMut};

/// One `message` event carrying a JSON-RPC message (which holds no line break: see
/// [`crate::message::one_line`]).
pub(crate) fn event(id: &str, data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + id.len() + 32);
    out.extend_from_slice(b"id: ");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b"\nevent: message\ndata: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
    out.freeze()
}

/// One `message` event without an id, for a stream that cannot be resumed (2026-07-28).
pub(crate) fn message_event(data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + 24);
    out.extend_from_slice(b"event: message\ndata: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
    out.freeze()
}

/// One event read from a stream.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) id: Option<String>,
    pub(crate) event: Option<String>,
    pub(crate) data: Vec<u8>,
}

/// Splits an SSE byte stream into events (the `text/event-stream` rules: lines end with
/// CRLF, LF or CR; `data` lines join with LF; comments and unknown fields are skipped).
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    buffer: Vec<u8>,
    current: Event,
    has_data: bool,
    max: usize,
}

/// An event longer than the decoder's limit.
#[derive(Debug)]
pub(crate) struct TooLong;

impl Decoder {
    pub(crate) fn new(max: usize) -> Decoder {
        Decoder {
            max,
            ..Decoder::default()
        }
    }

    /// Adds bytes; returns the events they complete.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Result<Vec<Event>, TooLong> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(at) = self.buffer[start..]
            .iter()
            .position(|b| *b == b'\n' || *b == b'\r')
        {
            let end = start + at;
            // A CR at the very end may be half of a CRLF: wait for the next byte.
            if self.buffer[end] == b'\r' && end + 1 == self.buffer.len() {
                break;
            }
            let line = self.buffer[start..end].to_vec();
            start = end + 1;
            if self.buffer[end] == b'\r' && self.buffer.get(start) == Some(&b'\n') {
                start += 1;
            }
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        self.buffer.drain(..start);
        if self.buffer.len() + self.current.data.len() > self.max {
            return Err(TooLong);
        }
        Ok(events)
    }

    fn line(&mut self, line: &[u8]) -> Option<Event> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.current);
            let had = std::mem::replace(&mut self.has_data, false);
            return had.then_some(event);
        }
        if line[0] == b':' {
            return None;
        }
        let (field, mut value) = match line.iter().position(|b| *b == b':') {
            Some(at) => (&line[..at], &line[at + 1..]),
            None => (line, &[][..]),
        };
        if value.first() == Some(&b' ') {
            value = &value[1..];
        }
        match field {
            b"data" => {
                if self.has_data {
                    self.current.data.push(b'\n');
                }
                self.current.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"id" => self.current.id = Some(String::from_utf8_lossy(value).into_owned()),
            b"event" => self.current.event = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_reads_and_line_ends() {
        let mut decoder = Decoder::new(1 << 10);
        let written = event("3-1", br#"{"a":1}"#);
        let (a, b) = written.split_at(9);
        assert!(decoder.feed(a).unwrap().is_empty());
        let events = decoder.feed(b).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].id.as_deref(), Some("3-1"));
        assert_eq!(events[0].data, br#"{"a":1}"#);
        let events = decoder
            .feed(b": keepalive\r\nid: 7\r\ndata: {\"b\":\r\ndata: 2}\r\r\nevent: x\r")
            .unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, b"{\"b\":\n2}");
        let events = decoder.feed(b"\ndata\n\n").unwrap();
        assert_eq!(events[0].event.as_deref(), Some("x"));
        assert!(events[0].data.is_empty());
        assert!(Decoder::new(4).feed(b"data: 123456789").is_err());
    }
}
