//! Framing: newline-delimited JSON-RPC messages in and out of byte streams (stdio, a child
//! process's pipes). The relay engine sees only whole messages ([`Inbound`]) and sends whole
//! messages (`Bytes`), so other transports plug in by producing and consuming the same.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// How much of an oversized message is kept, to read its `id` from.
pub const OVERSIZED_PREFIX: usize = 64 * 1024;

/// One thing a connection delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Inbound {
    /// One whole message (without its newline).
    Message(Bytes),
    /// One whole message and the W3C trace context its transport carried with it (an HTTP
    /// POST's `traceparent` and `tracestate` headers), which the relay hands to the host's
    /// [`CallObserver`](super::CallObserver) with the call. The message is relayed as a
    /// [`Inbound::Message`] is; the headers are never sent on.
    Traced {
        /// The message.
        message: Bytes,
        /// The transport's trace headers.
        trace: TransportTrace,
    },
    /// A message longer than the limit: its first bytes and its whole length. The rest was
    /// read and discarded; the connection goes on with the next message.
    Oversized {
        /// The first [`OVERSIZED_PREFIX`] bytes.
        prefix: Bytes,
        /// The message's length.
        len: usize,
    },
}

/// The W3C Trace Context headers a transport carried with a message, as the client sent them
/// (unchecked: the observer decides whether they are valid).
///
/// ```
/// use aml_mcp::relay::TransportTrace;
///
/// let trace = TransportTrace::new("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None);
/// assert!(trace.tracestate().is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportTrace {
    traceparent: String,
    tracestate: Option<String>,
}

impl TransportTrace {
    /// The `traceparent` header's value, and the `tracestate` header's (several of them
    /// joined with `,`, as W3C Trace Context combines them), if any.
    pub fn new(traceparent: impl Into<String>, tracestate: Option<String>) -> Self {
        TransportTrace {
            traceparent: traceparent.into(),
            tracestate,
        }
    }

    /// The `traceparent` header's value.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` header's value, if any.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }
}

/// Splits a byte stream into messages at `\n`, each at most `max` bytes (a trailing `\r` is
/// dropped, blank lines are skipped).
#[derive(Debug)]
pub struct LineFramer {
    buffer: BytesMut,
    scanned: usize,
    max: usize,
    discarding: Option<(Bytes, usize)>,
}

impl LineFramer {
    /// A framer for messages of at most `max` bytes.
    pub fn new(max: usize) -> Self {
        LineFramer {
            buffer: BytesMut::with_capacity(64 * 1024),
            scanned: 0,
            max,
            discarding: None,
        }
    }

    /// The next complete message in what was read so far.
    pub fn next_frame(&mut self) -> Option<Inbound> {
        loop {
            let Some(at) = memchr::memchr(b'\n', &self.buffer[self.scanned..]) else {
                self.scanned = self.buffer.len();
                if self.buffer.len() > self.max {
                    self.start_discarding();
                }
                return None;
            };
            let end = self.scanned + at;
            let mut line = self.buffer.split_to(end + 1);
            self.scanned = 0;
            line.truncate(end);
            if line.last() == Some(&b'\r') {
                line.truncate(line.len() - 1);
            }
            if let Some((prefix, len)) = self.discarding.take() {
                return Some(Inbound::Oversized {
                    prefix,
                    len: len + line.len(),
                });
            }
            if line.len() > self.max {
                let len = line.len();
                line.truncate(OVERSIZED_PREFIX);
                return Some(Inbound::Oversized {
                    prefix: line.freeze(),
                    len,
                });
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Some(Inbound::Message(line.freeze()));
        }
    }

    /// At the end of the stream: what is left after the last newline, as a last message (a
    /// peer may end its final line with the stream instead of a newline; it is not dropped).
    pub fn finish(&mut self) -> Option<Inbound> {
        self.buffer.extend_from_slice(b"\n");
        self.scanned = self.buffer.len() - 1;
        self.next_frame()
    }

    /// Keeps the first bytes of an overlong message and drops the rest as it arrives.
    fn start_discarding(&mut self) {
        let len = self.buffer.len();
        let dropped = self.buffer.split();
        self.scanned = 0;
        match &mut self.discarding {
            Some((_, seen)) => *seen += len,
            None => {
                let mut prefix = dropped;
                prefix.truncate(OVERSIZED_PREFIX);
                self.discarding = Some((prefix.freeze(), len));
            }
        }
    }

    /// The buffer to read into.
    pub fn buffer(&mut self) -> &mut BytesMut {
        self.buffer.reserve(16 * 1024);
        &mut self.buffer
    }
}

/// Reads messages from `reader` into `sink` until end of stream, a read error, or the
/// receiving side going away. Returns why it stopped (`None` at a clean end of stream).
pub async fn read_messages<R: AsyncRead + Unpin>(
    mut reader: R,
    max: usize,
    sink: mpsc::Sender<Inbound>,
) -> Option<std::io::Error> {
    let mut framer = LineFramer::new(max);
    loop {
        match reader.read_buf(framer.buffer()).await {
            Ok(0) => {
                if let Some(last) = framer.finish() {
                    let _ = sink.send(last).await;
                }
                return None;
            }
            Ok(_) => {
                let mut delivered = false;
                while let Some(frame) = framer.next_frame() {
                    if sink.send(frame).await.is_err() {
                        return None;
                    }
                    delivered = true;
                }
                if delivered {
                    // Let the message be handled (and whatever it causes be written) before
                    // the next read, which usually finds nothing: that empty read is then
                    // not on the message's path.
                    tokio::task::yield_now().await;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Some(e),
        }
    }
}

/// Writes each message from `source` to `writer` with its newline, batching whatever is
/// queued into one write, until the channel closes or a write fails.
pub async fn write_messages<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut source: mpsc::Receiver<Bytes>,
) -> std::io::Result<()> {
    let mut batch = Vec::with_capacity(64 * 1024);
    while let Some(first) = source.recv().await {
        batch.clear();
        batch.extend_from_slice(&first);
        batch.push(b'\n');
        while batch.len() < 1 << 20 {
            match source.try_recv() {
                Ok(next) => {
                    batch.extend_from_slice(&next);
                    batch.push(b'\n');
                }
                Err(_) => break,
            }
        }
        writer.write_all(&batch).await?;
        writer.flush().await?;
        if batch.capacity() > 4 << 20 {
            batch = Vec::with_capacity(64 * 1024);
        }
    }
    writer.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(framer: &mut LineFramer, bytes: &[u8]) -> Vec<Inbound> {
        framer.buffer().extend_from_slice(bytes);
        std::iter::from_fn(|| framer.next_frame()).collect()
    }

    #[test]
    fn splits_lines_across_reads() {
        let mut framer = LineFramer::new(100);
        assert_eq!(
            feed(&mut framer, b"{\"a\":1}\r\n{\"b\""),
            [Inbound::Message(Bytes::from_static(b"{\"a\":1}"))]
        );
        assert_eq!(
            feed(&mut framer, b":2}\n\n  \n"),
            [Inbound::Message(Bytes::from_static(b"{\"b\":2}"))]
        );
    }

    #[test]
    fn an_unterminated_last_line_is_a_message_at_the_end_of_the_stream() {
        let mut framer = LineFramer::new(10);
        assert!(feed(&mut framer, b"{\"a\":1}").is_empty());
        assert_eq!(
            framer.finish(),
            Some(Inbound::Message(Bytes::from_static(b"{\"a\":1}")))
        );
        assert_eq!(framer.finish(), None);
        assert!(feed(&mut framer, b"  ").is_empty());
        assert_eq!(framer.finish(), None, "blank: nothing");
        assert!(feed(&mut framer, &[b'y'; 30]).is_empty());
        assert!(matches!(
            framer.finish(),
            Some(Inbound::Oversized { len: 30, .. })
        ));
    }

    #[test]
    fn an_overlong_line_is_reported_once_and_the_next_one_is_read() {
        let mut framer = LineFramer::new(10);
        assert!(feed(&mut framer, b"{\"id\":7,\"x\":\"").is_empty());
        assert!(feed(&mut framer, &[b'y'; 50]).is_empty());
        let frames = feed(&mut framer, b"\"}\n{\"ok\":1}\n");
        let [Inbound::Oversized { prefix, len }, Inbound::Message(next)] = frames.as_slice() else {
            panic!("{frames:?}")
        };
        assert_eq!(*len, 13 + 50 + 2);
        assert!(prefix.starts_with(b"{\"id\":7"));
        assert_eq!(&next[..], b"{\"ok\":1}");
        let frames = feed(&mut framer, &[b'z'; 12]);
        assert!(frames.is_empty());
        assert_eq!(
            feed(&mut framer, b"\n"),
            [Inbound::Oversized {
                prefix: Bytes::from(vec![b'z'; 12]),
                len: 12
            }]
        );
    }
}
