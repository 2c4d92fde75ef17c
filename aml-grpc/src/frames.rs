//! The answer's data in frames h2 copies into its write buffer, so that a short answer's
//! headers, data and trailers leave in one write.
//!
//! h2 (0.4) copies a DATA frame below 256 bytes into its write buffer; a larger one is kept
//! aside and written on its own (a vectored write with what is buffered before it), and no
//! further frame is buffered until that write is done. A gated answer carries its plan and
//! receipt (about 270 bytes with a small result), so the trailers would follow in a second
//! write, which often costs the client a second wake-up. Split into pieces below the
//! threshold, the whole answer is buffered and written at once; the pieces are the same bytes
//! (a gRPC message may span any number of DATA frames). Answers of 1 KiB and more pass
//! unchanged: h2 writes them without copying, and cutting them would add a frame header per
//! 255 bytes.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tonic::body::Body;
use tonic::Status;

/// The largest DATA frame h2 copies into its write buffer (it keeps 256 bytes and more aside).
pub(crate) const PIECE: usize = 255;

/// Data of this many bytes or more passes unsplit (h2 itself copies up to 1 KiB when the
/// connection has no vectored writes).
pub(crate) const SPLIT_BELOW: usize = 1024;

/// A response body whose data frames of `PIECE + 1 .. SPLIT_BELOW` bytes are cut into
/// pieces of at most [`PIECE`] bytes.
pub(crate) struct SmallFrames {
    inner: Body,
    rest: Bytes,
}

impl SmallFrames {
    pub(crate) fn new(inner: Body) -> Self {
        SmallFrames {
            inner,
            rest: Bytes::new(),
        }
    }

    fn next_piece(&mut self) -> Frame<Bytes> {
        let take = self.rest.len().min(PIECE);
        Frame::data(self.rest.split_to(take))
    }
}

impl HttpBody for SmallFrames {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if !self.rest.is_empty() {
            return Poll::Ready(Some(Ok(self.next_piece())));
        }
        let frame = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
        let frame = match frame {
            Some(Ok(frame)) => frame,
            other => return Poll::Ready(other),
        };
        match frame.into_data() {
            Ok(data) if data.len() > PIECE && data.len() < SPLIT_BELOW => {
                self.rest = data;
                Poll::Ready(Some(Ok(self.next_piece())))
            }
            Ok(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
            Err(frame) => Poll::Ready(Some(Ok(frame))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(rest));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    /// A body of the given data frames, then trailers.
    struct Frames(std::collections::VecDeque<Frame<Bytes>>);

    impl HttpBody for Frames {
        type Data = Bytes;
        type Error = Status;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
            Poll::Ready(self.0.pop_front().map(Ok))
        }
        fn is_end_stream(&self) -> bool {
            self.0.is_empty()
        }
    }

    fn trailers() -> HeaderMap {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        trailers
    }

    /// What `SmallFrames` makes of one data frame of `len` bytes and trailers: the data frame
    /// lengths, the data joined, and whether the trailers came last.
    async fn split(len: usize) -> (Vec<usize>, Vec<u8>, bool) {
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let source = Frames(
            [Frame::data(Bytes::from(data)), Frame::trailers(trailers())]
                .into_iter()
                .collect(),
        );
        let mut body = SmallFrames::new(Body::new(source));
        let (mut lengths, mut joined, mut trailers_last) = (vec![], vec![], false);
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            assert!(!trailers_last, "a frame after the trailers");
            match frame.unwrap().into_data() {
                Ok(data) => {
                    lengths.push(data.len());
                    joined.extend_from_slice(&data);
                }
                Err(frame) => trailers_last = frame.trailers_ref() == Some(&trailers()),
            }
        }
        assert!(body.is_end_stream());
        (lengths, joined, trailers_last)
    }

    #[tokio::test]
    async fn short_answers_are_cut_below_the_copy_threshold_and_keep_their_bytes() {
        for len in [PIECE + 1, 278, 2 * PIECE, 2 * PIECE + 1, SPLIT_BELOW - 1] {
            let (lengths, joined, trailers_last) = split(len).await;
            let expected: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            assert_eq!(joined, expected, "{len}");
            assert!(
                lengths.iter().all(|&l| (1..=PIECE).contains(&l)),
                "{len}: {lengths:?}"
            );
            assert_eq!(lengths.len(), len.div_ceil(PIECE), "{len}");
            assert!(trailers_last, "{len}");
        }
    }

    #[tokio::test]
    async fn tiny_and_large_answers_pass_unchanged() {
        for len in [1, PIECE, SPLIT_BELOW, 70_000] {
            let (lengths, joined, trailers_last) = split(len).await;
            assert_eq!(lengths, [len]);
            assert_eq!(joined.len(), len);
            assert!(trailers_last);
        }
    }

    #[test]
    fn the_size_hint_counts_the_pieces_still_held() {
        let mut body = SmallFrames::new(Body::empty());
        body.rest = Bytes::from_static(&[0; 300]);
        assert_eq!(body.size_hint().exact(), Some(300));
        assert!(!body.is_end_stream());
        let piece = body.next_piece().into_data().unwrap();
        assert_eq!(piece.len(), PIECE);
        assert_eq!(body.size_hint().exact(), Some(300 - PIECE as u64));
        body.next_piece();
        assert!(body.is_end_stream());
    }
}
