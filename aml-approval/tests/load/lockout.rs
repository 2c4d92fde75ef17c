//! A local process without the token tries to lock the approver out of the page: it holds
//! a few hundred idle or half-sent connections (more than the page's connection limits) and
//! reopens each one as soon as the page cuts it. Meanwhile the approver, who has the URL,
//! loads the page and decides, round after round, the way a browser does (a new connection
//! for the page, another for the form's POST, no retry): every load and every decision must
//! succeed, each within a bound.
//!
//! The flooding process is this test binary again, in a child role, so that its sockets
//! and its scheduling are another process's, as they are for a real attacker. A third
//! process keeps the page open in 50 tabs, each with its live stream, all the while: the
//! streams must neither lock the approver out nor miss a change.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aml_core::ReceiptReason;
use common::{child_role, host, report_field, Tabs};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Connections the flooding process keeps open (the page's default limits are far lower).
const FLOOD: usize = 500;
/// Rounds of "load the page, decide".
const ROUNDS: usize = 20;
/// The longest a page load or a decision may take while the flood lasts: well below the
/// one second after which a dropped connection attempt is tried again.
const BOUND: Duration = Duration::from_secs(1);
/// Tabs with the page's live stream open while the flood lasts.
const TABS: usize = 50;

/// Child role (run only by the lockout test, through `--ignored`): keeps `AML_LOCKOUT_N`
/// connections to `AML_LOCKOUT_ADDR` open, half idle and half with a request head that is
/// never finished, reopening each as soon as it is cut, until its stdin closes. Prints
/// `AML_LOCKOUT_READY` once every connection was opened once, and at the end how many
/// connections it opened and how many the page cut.
#[test]
#[ignore = "a child role of a_flood_without_the_token_never_locks_the_approver_out"]
fn child_holds_and_reopens() {
    let address: SocketAddr = std::env::var("AML_LOCKOUT_ADDR")
        .expect("started by the lockout test")
        .parse()
        .unwrap();
    let n: usize = std::env::var("AML_LOCKOUT_N").unwrap().parse().unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (opened, cut, first) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..n {
            let (mut stopped, opened, cut, first) =
                (stopped.clone(), opened.clone(), cut.clone(), first.clone());
            tasks.push(tokio::spawn(async move {
                let mut counted = false;
                while !*stopped.borrow() {
                    let connect = tokio::net::TcpStream::connect(address);
                    let Ok(Ok(mut stream)) = tokio::time::timeout(Duration::from_secs(2), connect).await
                    else {
                        continue;
                    };
                    opened.fetch_add(1, Ordering::Relaxed);
                    if !counted {
                        counted = true;
                        if first.fetch_add(1, Ordering::Relaxed) + 1 == n as u64 {
                            println!("AML_LOCKOUT_READY");
                        }
                    }
                    if i % 2 == 1 {
                        let _ = stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ").await;
                    }
                    // Held until the page cuts it (or the flood ends).
                    let mut buf = [0u8; 256];
                    loop {
                        tokio::select! {
                            read = stream.read(&mut buf) => match read {
                                Ok(0) | Err(_) => {
                                    cut.fetch_add(1, Ordering::Relaxed);
                                    break;
                                }
                                Ok(_) => {}
                            },
                            _ = stopped.changed() => break,
                        }
                    }
                }
            }));
        }
        // The flood lasts until the test closes this process's stdin.
        let _ = tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await;
        let _ = stop.send(true);
        for task in tasks {
            let _ = task.await;
        }
    });
    println!(
        "AML_LOCKOUT_RESULT opened={} cut={}",
        opened.load(Ordering::Relaxed),
        cut.load(Ordering::Relaxed)
    );
}

#[test]
fn a_flood_without_the_token_never_locks_the_approver_out() {
    let _alone = common::flooding_alone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The page's default limits: the defaults are what must hold.
    let host = rt.block_on(host());
    let tabs = Tabs::open(&host, TABS);
    assert_eq!(host.page.open_streams(), TABS);
    let mut child = child_role("lockout::child_holds_and_reopens")
        .env("AML_LOCKOUT_ADDR", host.page.address().to_string())
        .env("AML_LOCKOUT_N", FLOOD.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The child's stdout, line by line, with deadlines.
    let out = BufReader::new(child.stdout.take().unwrap());
    let (lines, said) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let wait_for = |prefix: &str, within: Duration| -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match said.recv_timeout(left) {
                // libtest may have written "test NAME ... " before it on the same line.
                Ok(line) if line.contains(prefix) => {
                    return line.split(prefix).nth(1).unwrap_or_default().to_owned()
                }
                Ok(_) => {}
                Err(e) => panic!("no {prefix} line from the flooding child within {within:?}: {e}"),
            }
        }
    };
    wait_for("AML_LOCKOUT_READY", Duration::from_secs(60));

    let mut slowest = Duration::ZERO;
    let outcome = rt.block_on(async {
        for round in 0..ROUNDS {
            let call = host.propose(&format!("Round {round}."));
            host.wait_for_pending(1).await;
            let loaded = Instant::now();
            let page = host
                .request("GET", &format!("/?t={}", host.token()), &[], "")
                .await;
            let load_took = loaded.elapsed();
            if !page.starts_with("HTTP/1.1 200") || load_took > BOUND {
                return Err(format!(
                    "round {round}: the page did not load within {BOUND:?} (took {load_took:?}): {:?}",
                    page.lines().next()
                ));
            }
            let decided = Instant::now();
            let response = host.decide_from_page(&page, "approve").await;
            let decide_took = decided.elapsed();
            if !response.starts_with("HTTP/1.1 200") || decide_took > BOUND {
                return Err(format!(
                    "round {round}: the decision did not go through within {BOUND:?} (took {decide_took:?}): {:?}",
                    response.lines().next()
                ));
            }
            slowest = slowest.max(load_took).max(decide_took);
            assert_eq!(call.await.unwrap(), ReceiptReason::HostDispatchReturned);
        }
        Ok(())
    });
    drop(child.stdin.take());
    let report = wait_for("AML_LOCKOUT_RESULT ", Duration::from_secs(30));
    child.wait().unwrap();
    outcome.unwrap_or_else(|e| panic!("{e} (flood: {report})"));
    assert_eq!(host.page.open_streams(), TABS, "no tab lost its stream");
    tabs.close_having_seen(ROUNDS, ROUNDS);
    // The flood was real: the page cut (and the child reopened) far more connections than
    // the child keeps open at once.
    assert!(report_field(&report, "cut") > FLOOD as i64, "{report}");
    assert_eq!(host.calls.load(Ordering::SeqCst), ROUNDS);
    let _ = writeln!(
        std::io::stderr(),
        "lockout: {ROUNDS} rounds under a flood of {FLOOD} connections, slowest step {slowest:?} ({report})"
    );
}
