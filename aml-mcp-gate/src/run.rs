//! `run`: the gate in front of one server.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aml_core::{ActionBoundary, JsonLinesSink, LivePolicy, Policy};
use aml_mcp::relay::{self, stdio, DeferredSink, RelayConfig, RelayEnd, RelayTools};

use crate::{listen, upstream};

use crate::approvals::{self, Channel};
use crate::audit::Checkpointer;
use crate::reload;
use crate::sinks::Receipts;
use crate::state::{self, Location};
use crate::telemetry::{self, Health, Telemetry, UpstreamProbe};

/// Every option, checked, with its default.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) policy: PathBuf,
    pub(crate) tools: Option<PathBuf>,
    pub(crate) state: Location,
    pub(crate) receipts: Option<PathBuf>,
    /// `--metrics`: where the operator endpoints are served.
    pub(crate) metrics: Option<MetricsAt>,
    /// `--otlp-endpoint`: the URL spans are posted to (`…/v1/traces`).
    pub(crate) otlp: Option<String>,
    pub(crate) approve: Option<Channel>,
    pub(crate) approver_key: Option<PathBuf>,
    /// `--enforce shadow`: forward every call, record what the policy would do.
    pub(crate) shadow: bool,
    /// `--audit-key`: signs checkpoints of the audit chain.
    pub(crate) audit_key: Option<PathBuf>,
    pub(crate) audit_schedule: crate::audit::Schedule,
    pub(crate) approval_timeout: Duration,
    pub(crate) approval_port: u16,
    pub(crate) approval_page: approvals::PageLimits,
    pub(crate) relay: RelayConfig,
    pub(crate) command: Vec<OsString>,
    /// Where the server command runs (`None`: here).
    pub(crate) server_dir: Option<PathBuf>,
    /// `[[servers]]`: several servers instead of one (ADR 033).
    pub(crate) servers: Vec<crate::servers::Listed>,
    pub(crate) listen: crate::listen::ListenArgs,
    pub(crate) upstream: crate::upstream::UpstreamArgs,
}

/// Where `--metrics` serves `/metrics`, `/healthz` and `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MetricsAt {
    /// A listener of their own (and the `--listen` port, if any).
    Addr(std::net::SocketAddr),
    /// Only on the `--listen` port.
    Listen,
}

impl MetricsAt {
    /// Reads a `--metrics` value (`listen` needs `--listen`).
    pub(crate) fn parse(value: &str, listening: bool) -> Result<MetricsAt, String> {
        use std::net::ToSocketAddrs;
        if value == "listen" {
            return match listening {
                true => Ok(MetricsAt::Listen),
                false => Err(
                    "--metrics listen needs --listen (or give an address: --metrics 127.0.0.1:9464)".into(),
                ),
            };
        }
        let bad = |why: String| {
            format!("--metrics {value:?}: {why}; expected HOST:PORT (e.g. 127.0.0.1:9464, port 0 for any) or `listen`")
        };
        if let Ok(addr) = value.parse() {
            return Ok(MetricsAt::Addr(addr));
        }
        match value.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => value
                .to_socket_addrs()
                .map_err(|e| bad(format!("cannot resolve {host}: {e}")))?
                .next()
                .map(MetricsAt::Addr)
                .ok_or_else(|| bad(format!("{host} resolves to no address"))),
            _ => Err(bad("not an address".into())),
        }
    }
}

/// Everything read from files, checked before the server starts.
#[derive(Debug)]
pub(crate) struct Loaded {
    policy: Policy,
    tools: Option<String>,
    audit_key: Option<aml_approval::ApproverKey>,
}

/// Reads and checks the policy, tools and key files.
pub(crate) fn load(settings: &Settings) -> Result<Loaded, String> {
    let read = |path: &PathBuf| {
        std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let named = |path: &PathBuf, e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let policy = Policy::read_file(&settings.policy)?;
    if let Some(e) = policy.error() {
        return Err(named(&settings.policy, e));
    }
    let tools = match &settings.tools {
        Some(path) => {
            let text = read(path)?;
            // Checked now; built again with the boundary below.
            let probe = ActionBoundary::builder(Arc::new(Policy::empty())).build();
            let servers = crate::servers::namings(&settings.servers);
            RelayTools::from_json_for_servers(&text, probe, &servers).map_err(|e| {
                crate::init::placeholder_error(path, &text).unwrap_or_else(|| named(path, &e))
            })?;
            Some(text)
        }
        None => None,
    };
    if let Some(key) = &settings.approver_key {
        read(key)?;
    }
    // A key that cannot sign is an error now, never a chain left unsigned.
    let audit_key = settings
        .audit_key
        .as_deref()
        .map(crate::audit::read_key)
        .transpose()?;
    warn_typos(tools.as_deref(), &policy);
    Ok(Loaded {
        policy,
        tools,
        audit_key,
    })
}

/// Logs what in the tools file and policy looks like a typo (they load, and do less than
/// they say): at start and after each reload. The relay warns of a registered tool the server
/// does not list once it sees the server's list.
pub(crate) fn warn_typos(tools: Option<&str>, policy: &Policy) {
    for warning in aml_mcp::relay::catalog_warnings(tools, policy) {
        tracing::warn!("{warning}");
    }
}

/// Waits for the relay, or for SIGTERM or SIGINT: MCP clients close the gate's input, wait
/// about two seconds, then send SIGTERM, sooner than the relay's drain limit. The relay is
/// then dropped, which records each call still in flight as abandoned, so that its receipt is
/// written before the gate exits.
async fn until_stopped(mut relay: tokio::task::JoinHandle<RelayEnd>) -> Result<RelayEnd, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut terminate, mut interrupt) =
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(terminate), Ok(interrupt)) => (terminate, interrupt),
            (Err(e), _) | (_, Err(e)) => return Err(format!("cannot watch SIGTERM and SIGINT: {e}")),
        };
    let name = tokio::select! {
        end = &mut relay => return end.map_err(|e| format!("the relay failed: {e}")),
        _ = terminate.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
    };
    relay.abort();
    let _ = relay.await;
    tracing::info!("stopped by {name}; calls still in flight were recorded as abandoned");
    Ok(RelayEnd::ClientClosed)
}

/// Makes every record and outcome durable before the gate exits (bounded), and says how the
/// state grouped its writes.
async fn settle(receipts: &Receipts, grouped: Option<&dyn state::Grouped>) {
    if !receipts.flush(Duration::from_secs(5)).await {
        eprintln!("aml-mcp-gate: some receipt records could not be written");
    }
    if let Some(stats) = grouped.map(state::Grouped::commit_stats) {
        tracing::info!(
            writes = stats.writes,
            commits = stats.transactions,
            "state: writes committed"
        );
    }
}

/// Why the gate stopped, when it was not the client closing the session.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Exit 2: the configuration cannot work.
    Config(String),
    /// Exit 1: the server or the state failed.
    Runtime(String),
}

pub(crate) async fn run(mut settings: Settings, mut loaded: Loaded) -> Result<(), Failure> {
    let state = state::open(&settings.state)
        .await
        .map_err(|e| Failure::Runtime(format!("cannot open the state: {e}")))?;
    tracing::info!("state: {}", settings.state.describe());
    let checkpoints = match (loaded.audit_key.take(), &state.audit) {
        (Some(key), Some(log)) => Some(Checkpointer::start(
            Arc::clone(log),
            key,
            settings.audit_schedule.clone(),
            settings.receipts.clone(),
        )),
        (Some(_), None) => return Err(Failure::Config("--audit-key needs a database --state".into())),
        (None, _) => None,
    };
    // Records: into the state, and as JSON lines into --receipts (stderr when nothing else
    // keeps them). Never on stdout.
    let (stored, stored_task) = state.receipts.unzip();
    let grouped = state.grouped.clone();
    let log = match (&settings.receipts, &stored) {
        (Some(path), _) => Some(JsonLinesSink::append(path)),
        (None, None) => Some(JsonLinesSink::stderr()),
        (None, Some(_)) => None,
    }
    .transpose()
    .map_err(|e| Failure::Config(format!("cannot open the receipt log: {e}")))?
    .map(Arc::new);
    let receipts = Receipts::new(log, stored);
    let listed = !settings.servers.is_empty();
    let server = match listed {
        true => None,
        false => Some(
            upstream::Server::from_args(
                &settings.upstream,
                &settings.command,
                settings.server_dir.as_deref(),
                settings.relay.max_message_bytes,
            )
            .map_err(Failure::Config)?,
        ),
    };
    let label = match &server {
        Some(server) => server.name(),
        None => crate::servers::label(&settings.servers),
    };
    let telemetry = settings
        .metrics
        .as_ref()
        .map(|_| Arc::new(Telemetry::new(&telemetry::server_label(&label))));
    if let Some(telemetry) = &telemetry {
        telemetry
            .metrics
            .set_tools(telemetry::tool_names(loaded.tools.as_deref()));
    }
    // Call records go out after each answer (counted first); approval decisions straight away.
    let sink: Arc<dyn aml_core::ReceiptSink> = match &telemetry {
        Some(telemetry) => Arc::new(telemetry::Observed {
            inner: Arc::new(receipts.clone()),
            telemetry: Arc::clone(telemetry),
        }),
        None => Arc::new(receipts.clone()),
    };
    let (deferred, records) = DeferredSink::spawn(sink);
    let metrics = telemetry.as_ref().map(|t| Arc::clone(&t.metrics));
    let grants = match &metrics {
        Some(metrics) => Arc::new(telemetry::TimedGrants {
            inner: Arc::clone(&state.grants),
            metrics: Arc::clone(metrics),
        }),
        None => Arc::clone(&state.grants),
    };
    // Shared with the reloader: SIGHUP or an edit of the files replaces it for every call.
    let live_policy = LivePolicy::new(loaded.policy.clone());
    let mut boundary = ActionBoundary::builder(live_policy.clone())
        .sink(deferred)
        .grants_arc(grants)
        .usage(Arc::clone(&state.usage));
    if settings.shadow {
        tracing::warn!(
            "SHADOW MODE (--enforce shadow): the policy is not enforced; every call is forwarded, and one it would block or send for approval is recorded with would_block (journal receipts --shadow)"
        );
        boundary = boundary.shadow();
    }
    if let Some(channel) = settings.approve {
        boundary = approvals::with_approvals(
            boundary,
            approvals::Setup {
                channel,
                key: settings.approver_key.as_deref(),
                timeout: settings.approval_timeout,
                port: settings.approval_port,
                page_limits: settings.approval_page.clone(),
                records: receipts.clone(),
                issuer: Arc::clone(&state.issuer),
                decisions: state.decisions.clone(),
                shared: state.open.clone(),
                history: state.history.clone(),
                metrics: metrics.clone(),
            },
        )
        .await
        .map_err(Failure::Config)?;
    }
    let boundary = boundary.build();
    let namings = crate::servers::namings(&settings.servers);
    let mut tools = match &loaded.tools {
        Some(text) => RelayTools::from_json_for_servers(text, boundary, &namings)
            .map_err(|e| Failure::Config(e.to_string()))?,
        None => RelayTools::empty(boundary),
    };
    let forward = match &telemetry {
        Some(telemetry) => Some(Arc::new(telemetry::TimedForward {
            journal: state.forward.clone(),
            telemetry: Arc::clone(telemetry),
        }) as Arc<dyn relay::ForwardWrapper>),
        None => state.forward.clone(),
    };
    if let Some(forward) = forward {
        tools = tools.with_forward_wrapper(forward);
    }
    let traces = telemetry::start_traces(settings.otlp.as_deref(), &label).map_err(Failure::Config)?;
    let mut server = server;
    if let Some(traces) = &traces {
        tools = tools.with_call_observer(Arc::clone(traces) as Arc<dyn relay::CallObserver>);
        // A server over HTTP gets each forwarded call's trace context as headers (relay ids
        // are the relay's own, so the servers of a list can share one table).
        let outbound = relay::OutboundTraces::default();
        let mut sends = server
            .as_mut()
            .is_some_and(|server| server.send_traces(outbound.clone()));
        for listed in &mut settings.servers {
            sends |= listed.send_traces(outbound.clone());
        }
        if sends {
            tools = tools.with_outbound_traces(outbound);
        }
    }
    let reloader = reload::Reloader::new(
        settings.policy.clone(),
        settings.tools.clone(),
        live_policy.clone(),
        tools.clone(),
        metrics.clone(),
    )
    .start(&loaded.policy)
    .map_err(|e| Failure::Runtime(format!("cannot listen for SIGHUP: {e}")))?;
    let config = settings.relay;
    let probe = Arc::new(UpstreamProbe::for_server(settings.upstream.upstream.as_deref()));
    let health = telemetry.as_ref().map(|telemetry| {
        Arc::new(Health::new(
            Arc::clone(telemetry),
            live_policy.clone(),
            receipts.clone(),
            Arc::clone(&probe),
        ))
    });
    let _ops = match (&settings.metrics, &health) {
        (Some(MetricsAt::Addr(addr)), Some(health)) => {
            let ops = aml_mcp_http::serve_ops(*addr, Arc::clone(health) as Arc<dyn aml_mcp_http::Ops>)
                .await
                .map_err(|e| Failure::Config(format!("--metrics: cannot listen on {addr}: {e}")))?;
            // The readiness line: where to scrape (port 0 picks one).
            eprintln!("aml-mcp-gate: metrics at http://{}/metrics", ops.local_addr());
            Some(ops)
        }
        _ => None,
    };
    if let Some(addr) = &settings.listen.listen {
        let fronted = match server {
            Some(server) => listen::Fronted::One(server),
            None => listen::Fronted::Listed(&settings.servers),
        };
        let servers = settings.servers.len().max(1);
        let mut front = settings
            .listen
            .front_config(addr, servers)
            .map_err(Failure::Config)?;
        if let Some(health) = &health {
            front = front.with_ops(Arc::clone(health) as Arc<dyn aml_mcp_http::Ops>);
        }
        let observed = listen::Observed {
            metrics,
            upstream: probe,
        };
        let served = listen::serve(addr, front, tools, config, fronted, observed).await;
        // Every relay has ended; with the reloader, every other handle to the deferred sink.
        reloader.abort();
        let _ = tokio::time::timeout(Duration::from_secs(5), records).await;
        settle(&receipts, grouped.as_deref()).await;
        if let Some(checkpoints) = checkpoints {
            checkpoints.finish().await;
        }
        telemetry::stop_traces(traces).await;
        return served.map_err(Failure::Runtime);
    }
    let Some(server) = server else {
        let (end, stoppers) = run_listed(&settings.servers, tools, config, metrics.as_ref()).await?;
        reloader.abort();
        if tokio::time::timeout(Duration::from_secs(5), records)
            .await
            .is_err()
        {
            eprintln!("aml-mcp-gate: some call records were not written in time");
        }
        crate::servers::stop(stoppers, Duration::from_secs(2)).await;
        settle(&receipts, grouped.as_deref()).await;
        if let Some(checkpoints) = checkpoints {
            checkpoints.finish().await;
        }
        telemetry::stop_traces(traces).await;
        drop((receipts, stored_task));
        return ended(end, &format!("every server ({label})"));
    };
    let program = server.name();
    let (mut upstream, stopper) = server
        .start(config.max_message_bytes)
        .map_err(Failure::Runtime)?
        .split();
    // Started by hand (a terminal, no MCP client): check the server now. An MCP client's own
    // first request is the check otherwise (a probe would choose the protocol era for it).
    let early = if std::io::stdin().is_terminal() {
        eprintln!(
            "aml-mcp-gate: stdin is a terminal; MCP clients start the gate with pipes. Checking the server…"
        );
        relay::probe(&mut upstream, config.handshake_timeout).await
    } else {
        Ok(Vec::new())
    };
    let end = match early {
        Ok(early) => {
            let client = stdio::stdio_connection(config.max_message_bytes);
            // A task of the runtime, not the `block_on` future: waking a task from another
            // task on this thread is a queue push; waking `block_on` writes to an eventfd.
            if let Some(metrics) = &metrics {
                metrics.sessions.set(1);
            }
            let relay = tokio::spawn(relay::run(tools, config, client, upstream, early));
            let end = until_stopped(relay).await;
            if let Ok(RelayEnd::UpstreamGone(_)) = &end {
                probe.set_child(false);
            }
            end
        }
        Err(e) => {
            // Closes the server's input, so a server that reads until the end can exit.
            drop((upstream, tools));
            Err(format!("{program}: {e}"))
        }
    };
    // The reloader holds the last other handle to the tools (and so to the deferred sink).
    reloader.abort();
    // The relay (and with it every handle to the deferred sink) is gone: its task ends once
    // it has passed every record on.
    if tokio::time::timeout(Duration::from_secs(5), records)
        .await
        .is_err()
    {
        eprintln!("aml-mcp-gate: some call records were not written in time");
    }
    stopper.stop(Duration::from_secs(2)).await;
    settle(&receipts, grouped.as_deref()).await;
    if let Some(checkpoints) = checkpoints {
        checkpoints.finish().await;
    }
    telemetry::stop_traces(traces).await;
    drop((receipts, stored_task));
    ended(end, &format!("the server {program}"))
}

/// The gate in front of the `[[servers]]` on stdio, until the client goes (or every server
/// has); with what stops the servers.
async fn run_listed(
    listed: &[crate::servers::Listed],
    tools: RelayTools,
    config: RelayConfig,
    metrics: Option<&Arc<telemetry::Metrics>>,
) -> Result<(Result<RelayEnd, String>, Vec<upstream::Stopper>), Failure> {
    let (upstreams, stoppers) = crate::servers::start(listed, config.max_message_bytes);
    let client = stdio::stdio_connection(config.max_message_bytes);
    if let Some(metrics) = metrics {
        metrics.sessions.set(1);
    }
    let relay = tokio::spawn(relay::run_servers(tools, config, client, upstreams));
    Ok((until_stopped(relay).await, stoppers))
}

/// How the gate exits once its session has ended; `servers` names what it fronted ("the
/// server X", "every server (a,b)").
fn ended(end: Result<RelayEnd, String>, servers: &str) -> Result<(), Failure> {
    match end {
        Ok(RelayEnd::ClientClosed) => Ok(()),
        Ok(RelayEnd::UpstreamGone(reason)) => Err(Failure::Runtime(format!(
            "{servers} is gone ({reason}); calls after that were refused"
        ))),
        Ok(RelayEnd::Handshake(why)) => Err(Failure::Runtime(format!("{servers}: {why}"))),
        Ok(other) => Err(Failure::Runtime(format!("the relay ended: {other:?}"))),
        Err(e) => Err(Failure::Runtime(e)),
    }
}
