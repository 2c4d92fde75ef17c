//! A short dispatched answer (result, plan and receipt: over h2's 256-byte copy threshold)
//! leaves the server in one write: headers, data and trailers together, so the client is
//! woken once. Counted on the server's side of a real loopback connection.

use crate::support;

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use aml_grpc::pb;
use aml_grpc::pb::tool_service_client::ToolServiceClient;
use aml_grpc::pb::tool_service_server::ToolServiceServer;
use prost::Message;
use support::{host, Setup};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tonic::codegen::tokio_stream::Stream;
use tonic::transport::server::{Connected, Router};

/// A server connection that counts its writes that moved bytes.
struct Counted {
    inner: TcpStream,
    writes: Arc<AtomicUsize>,
}

impl Counted {
    fn count(&self, written: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = written {
            if n > 0 {
                self.writes.fetch_add(1, Ordering::SeqCst);
            }
        }
        written
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.count(written)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.count(written)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Connected for Counted {
    type ConnectInfo = ();
    fn connect_info(&self) {}
}

/// Accepted loopback connections, counted.
struct Incoming {
    listener: TcpListener,
    writes: Arc<AtomicUsize>,
}

impl Stream for Incoming {
    type Item = io::Result<Counted>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let (inner, _) = std::task::ready!(self.listener.poll_accept(cx))?;
        inner.set_nodelay(true)?;
        let writes = Arc::clone(&self.writes);
        Poll::Ready(Some(Ok(Counted { inner, writes })))
    }
}

/// The server writes for each of ten dispatched calls (after one to warm the connection up).
async fn writes_per_answer(router: Router) -> Vec<usize> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let writes = Arc::new(AtomicUsize::new(0));
    let incoming = Incoming {
        listener,
        writes: Arc::clone(&writes),
    };
    let server = tokio::spawn(router.serve_with_incoming(incoming));
    let mut client = ToolServiceClient::connect(format!("http://{address}"))
        .await
        .unwrap();
    let request = || pb::CallToolRequest::new("fetch_record", r#"{"id":7}"#);
    client.call_tool(request()).await.unwrap();
    let mut counts = vec![];
    for _ in 0..10 {
        let before = writes.load(Ordering::SeqCst);
        let answer = client.call_tool(request()).await.unwrap().into_inner();
        counts.push(writes.load(Ordering::SeqCst) - before);
        assert!(answer.plan.is_some() && answer.receipt.is_some());
        // The gRPC message (5-byte prefix and the answer) is over h2's copy threshold.
        assert!(5 + answer.encoded_len() > 256, "{}", answer.encoded_len());
    }
    server.abort();
    counts
}

#[tokio::test]
async fn a_short_dispatched_answer_leaves_in_one_write() {
    let service = host(Setup::default()).service;
    let router = tonic::transport::Server::builder().add_service(service.into_route());
    assert_eq!(writes_per_answer(router).await, [1; 10]);
}

#[tokio::test]
async fn without_the_route_h2_writes_the_same_answer_in_two() {
    // The control: the generated server alone. If this fails, h2 no longer writes a large
    // DATA frame apart from what follows it, and `frames.rs` may no longer be needed.
    let service = host(Setup::default()).service;
    let router = tonic::transport::Server::builder().add_service(ToolServiceServer::new(service));
    assert_eq!(writes_per_answer(router).await, [2; 10]);
}
