//! A connection flood against the approval page. Another process (this test binary again,
//! in a child role) opens 2,000 idle connections and runs a slowloris client, while this
//! process — the host — keeps a small file-descriptor limit (256), and a third process
//! keeps the page open in 50 tabs, each with its live stream. Afterwards an approval
//! through the page still dispatches once, and every tab saw it come and go. Then the same flood against a page whose
//! connection cap is above that limit: accepts fail for lack of descriptors, and the accept
//! loop logs, backs off and keeps serving.
//!
//! Limits: the host lowers its own soft `RLIMIT_NOFILE` to 256 (so the flood exceeds what it
//! could hold without the cap; this file holds one test, so no other test shares the
//! process); the child inherits that and raises its soft limit again, up to its hard limit,
//! to hold 2,000 sockets. Nothing else is changed.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use aml_core::ReceiptReason;
use common::{child_role, flooding_alone, host_with, report_field, Tabs};
use nix::sys::resource::{getrlimit, setrlimit, Resource};

const HOST_FD_LIMIT: u64 = 256;
const FLOOD: usize = 2000;
/// Tabs with the page's live stream open while the flood lasts.
const TABS: usize = 50;

/// Child role (run only by the flood test, through `--ignored`): opens `AML_FLOOD_N` idle
/// connections and one slowloris connection to `AML_FLOOD_ADDR`, holds them for
/// `AML_FLOOD_HOLD_MS`, and prints what happened.
#[test]
#[ignore = "a child role of a_flood_leaves_the_approval_page_working"]
fn child_floods() {
    let address: SocketAddr = std::env::var("AML_FLOOD_ADDR")
        .expect("started by the flood test")
        .parse()
        .unwrap();
    let n: usize = std::env::var("AML_FLOOD_N").unwrap().parse().unwrap();
    let hold = Duration::from_millis(std::env::var("AML_FLOOD_HOLD_MS").unwrap().parse().unwrap());
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let needed = n as u64 + 64;
    if soft < needed {
        assert!(
            hard >= needed,
            "the hard descriptor limit {hard} is below the {needed} this flood needs"
        );
        setrlimit(Resource::RLIMIT_NOFILE, needed, hard).unwrap();
    }
    let slowloris = std::thread::spawn(move || {
        let started = Instant::now();
        let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_secs(2)) else {
            return None;
        };
        stream.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let _ = stream.write_all(b"GET / HTTP/1.1\r\nX-Slow: ");
        let mut buf = [0u8; 512];
        while started.elapsed() < Duration::from_secs(30) {
            if stream.write_all(b"a").is_err() {
                return Some(started.elapsed());
            }
            match stream.read(&mut buf) {
                Ok(0) => return Some(started.elapsed()),
                Err(e)
                    if e.kind() != std::io::ErrorKind::WouldBlock
                        && e.kind() != std::io::ErrorKind::TimedOut =>
                {
                    return Some(started.elapsed())
                }
                _ => {}
            }
        }
        None
    });
    let mut idle = Vec::with_capacity(n);
    let mut failed = 0;
    for _ in 0..n {
        match TcpStream::connect_timeout(&address, Duration::from_secs(2)) {
            Ok(stream) => idle.push(stream),
            Err(_) => failed += 1,
        }
    }
    std::thread::sleep(hold); // holds the flood's connections open (the attack simulated)
    let cut = slowloris.join().unwrap();
    println!(
        "AML_FLOOD_RESULT connected={} failed={failed} slowloris_cut_ms={}",
        idle.len(),
        cut.map_or(-1, |d| d.as_millis() as i64)
    );
}

/// How many file descriptors this process holds right now (the limit, if it cannot open
/// one more to look).
fn descriptors_open() -> u64 {
    match std::fs::read_dir("/proc/self/fd") {
        Ok(entries) => entries.count() as u64,
        Err(_) => HOST_FD_LIMIT, // EMFILE: not even one more descriptor
    }
}

/// Floods `address` from a child process with `n` connections; the child's report, and
/// the most descriptors this process held meanwhile.
fn flood(address: SocketAddr, n: usize, hold_ms: u64) -> (String, u64) {
    let mut child = child_role("flood::child_floods")
        .env("AML_FLOOD_ADDR", address.to_string())
        .env("AML_FLOOD_N", n.to_string())
        .env("AML_FLOOD_HOLD_MS", hold_ms.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut peak = 0;
    // Samples the descriptors this process holds until the child is done.
    aml_test_support::wait_until("the flooding child to finish", Duration::from_secs(120), || {
        peak = peak.max(descriptors_open());
        child.try_wait().unwrap()
    });
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let report = out
        .split("AML_FLOOD_RESULT ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("no result from the flooding child: {out:?}"))
        .to_owned();
    (report, peak)
}

/// The flood test lowers the descriptor limit of its whole process, so it runs in a process
/// of its own: this binary again, running only [`flooded_host`].
#[test]
fn a_flood_leaves_the_approval_page_working() {
    let _alone = flooding_alone();
    let out = child_role("flood::flooded_host")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("test flood::flooded_host ... ok"),
        "the flooded host failed ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Child role of [`a_flood_leaves_the_approval_page_working`]: the host under the flood.
#[test]
#[ignore = "a child role of a_flood_leaves_the_approval_page_working"]
fn flooded_host() {
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, HOST_FD_LIMIT, hard).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // The cap is the defence: 2,000 idle connections and a slowloris client.
    let host = rt.block_on(host_with(|b| {
        b.max_unauthenticated(64)
            .token_timeout(Duration::from_secs(1))
            .request_timeout(Duration::from_secs(1))
    }));
    let tabs = Tabs::open(&host, TABS);
    assert_eq!(host.page.open_streams(), TABS);
    let (report, peak) = flood(host.page.address(), FLOOD, 3000);
    assert!(
        peak < HOST_FD_LIMIT - 4,
        "the caps keep the host well within its descriptors: {peak} of {HOST_FD_LIMIT} open at the peak"
    );
    eprintln!("descriptors at the peak of the flood: {peak} of {HOST_FD_LIMIT}");
    assert_eq!(report_field(&report, "connected"), FLOOD as i64, "{report}");
    let cut = report_field(&report, "slowloris_cut_ms");
    assert!(
        (0..5000).contains(&cut),
        "the slowloris client was not cut off: {report}"
    );
    rt.block_on(async {
        let call = host.propose("After the flood.");
        host.wait_for_pending(1).await;
        let response = host.click("approve").await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert_eq!(call.await.unwrap(), ReceiptReason::HostDispatchReturned);
        assert_eq!(host.calls.load(Ordering::SeqCst), 1);
    });
    tabs.close_having_seen(1, 1);

    // A cap above the descriptor limit: accepts fail with "too many open files" while the
    // flood lasts; the loop backs off and serves again once descriptors are free.
    // The idle connections outlive the flood's hold, so the descriptors stay taken while it
    // lasts however slowly the (shared, loaded) machine lets them connect.
    let exposed = rt.block_on(host_with(|b| {
        b.max_unauthenticated(10_000)
            .token_timeout(Duration::from_secs(6))
            .request_timeout(Duration::from_secs(6))
    }));
    let (report, peak) = flood(exposed.page.address(), 400, 3000);
    assert!(
        report_field(&report, "connected") > HOST_FD_LIMIT as i64,
        "{report}"
    );
    assert!(
        peak >= HOST_FD_LIMIT - 4,
        "the flood was meant to exhaust the host's descriptors ({peak} at the peak): {report}"
    );
    rt.block_on(async {
        let call = exposed.propose("After running out of descriptors.");
        exposed.wait_for_pending(1).await;
        // The backlog the flood left behind drains within the request timeout.
        let response = aml_test_support::wait_until_async(
            "the approval to be answered 200 once the backlog drained",
            Duration::from_secs(30),
            || async {
                let response = exposed.click("approve").await;
                response.starts_with("HTTP/1.1 200").then_some(response)
            },
        )
        .await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert_eq!(call.await.unwrap(), ReceiptReason::HostDispatchReturned);
        assert_eq!(exposed.calls.load(Ordering::SeqCst), 1);
    });
}
