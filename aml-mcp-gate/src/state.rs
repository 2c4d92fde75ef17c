//! `--state`: where the gate keeps its one-use grants, the intent written before each call is
//! forwarded and its outcome, approval decisions and receipts.
//!
//! One synchronous commit is on a call's path: its intent (for an approved call, the claim
//! that writes it), shared with every call in flight at once (group commit). The outcome is
//! left for the call's receipt record; the two are stored together by the next commit, after
//! the answer (ADR 021).

use std::path::PathBuf;
use std::sync::Arc;

use aml_core::{GrantStore, InMemoryUsage, ToolExecutor, UsageLedger};
use aml_grants::{
    AuditLog, ClaimsWithIntent, CommitStats, DecisionJournal, GrantIssuer, GrantLifetimes, JournaledGrants,
    MemoryGrants, OpenGrants, PostgresStore, ReceiptJournal, ReceiptStore, SettlesCalls, SqliteStore,
    StoredReceipts,
};
use aml_mcp::relay::ForwardWrapper;
use tokio::task::JoinHandle;

/// Where the state is, as `--state` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    /// Nothing kept across restarts.
    Memory,
    /// One SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database (connection URL), shared by several gates.
    Postgres(String),
}

impl Location {
    /// Reads a `--state` value; `None` is the default file in the user's state folder.
    pub(crate) fn parse(value: Option<&str>) -> Result<Location, String> {
        match value {
            Some("memory") => Ok(Location::Memory),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(Location::Postgres(url.to_owned()))
            }
            Some("") => Err("--state is empty: give a file path, postgres://…, or memory".into()),
            Some(path) => Ok(Location::Sqlite(PathBuf::from(path))),
            None => default_file().map(Location::Sqlite),
        }
    }

    /// What to tell the user (a PostgreSQL URL without its password).
    pub(crate) fn describe(&self) -> String {
        match self {
            Location::Memory => "memory (nothing is kept across restarts)".into(),
            Location::Sqlite(path) => format!("SQLite file {}", path.display()),
            Location::Postgres(url) => format!("PostgreSQL {}", without_password(url)),
        }
    }
}

/// `$XDG_STATE_HOME/aml-mcp-gate/state.sqlite3`, else `~/.local/state/aml-mcp-gate/…`.
fn default_file() -> Result<PathBuf, String> {
    let base = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => PathBuf::from(home).join(".local/state"),
            None => return Err("neither XDG_STATE_HOME nor HOME is set: give --state".into()),
        },
    };
    Ok(base.join("aml-mcp-gate").join("state.sqlite3"))
}

fn without_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{}{user}{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// An open state store: every part the gate needs, all in one database (or in memory).
#[derive(Debug)]
pub(crate) struct State {
    /// Claims grants; with a database, each claim also writes the call's intent.
    pub(crate) grants: Arc<dyn GrantStore>,
    /// Issues the grant a signed approval names.
    pub(crate) issuer: Arc<dyn GrantIssuer>,
    /// Journals each forward (intent before, outcome after); `None` in memory.
    pub(crate) forward: Option<Arc<dyn ForwardWrapper>>,
    /// Keeps verified approval decisions; `None` in memory.
    pub(crate) decisions: Option<Arc<dyn DecisionJournal>>,
    /// Stores each receipt record, with its call's outcome, from a task; `None` in memory.
    pub(crate) receipts: Option<(StoredReceipts, JoinHandle<()>)>,
    /// The store's receipt table itself, where the approval page keeps its history; `None`
    /// in memory.
    pub(crate) history: Option<Arc<dyn ReceiptStore>>,
    /// Finds a grant a person issued on any gate sharing this store; `None` in memory.
    pub(crate) open: Option<Arc<dyn OpenGrants>>,
    /// How the store grouped its writes into commits; `None` in memory.
    pub(crate) grouped: Option<Arc<dyn Grouped>>,
    /// The audit chain the store keeps of its records; `None` in memory.
    pub(crate) audit: Option<Arc<dyn AuditLog>>,
    /// Where each caller's dispatched calls are counted, for budgets (`context.usage`):
    /// the database (shared by replicas), or this process's memory.
    pub(crate) usage: Arc<dyn UsageLedger>,
}

/// A store that groups writes into commits (both databases do).
pub(crate) trait Grouped: Send + Sync + std::fmt::Debug {
    fn commit_stats(&self) -> CommitStats;
}

impl Grouped for SqliteStore {
    fn commit_stats(&self) -> CommitStats {
        SqliteStore::commit_stats(self)
    }
}

impl Grouped for PostgresStore {
    fn commit_stats(&self) -> CommitStats {
        PostgresStore::commit_stats(self)
    }
}

/// A store that keeps everything: grants, intents, decisions, receipts.
trait Everything:
    ClaimsWithIntent
    + GrantIssuer
    + DecisionJournal
    + SettlesCalls
    + OpenGrants
    + Grouped
    + AuditLog
    + UsageLedger
{
}
impl<T> Everything for T where
    T: ClaimsWithIntent
        + GrantIssuer
        + DecisionJournal
        + SettlesCalls
        + OpenGrants
        + Grouped
        + AuditLog
        + UsageLedger
{
}

/// Opens (creating it if needed) the state at `location`; with a database, starts the task
/// that stores receipts (on the current runtime).
pub(crate) async fn open(location: &Location) -> Result<State, String> {
    let Some(store) = database(location, true).await? else {
        let grants = Arc::new(MemoryGrants::default());
        return Ok(State {
            grants: grants.clone(),
            issuer: grants,
            forward: None,
            decisions: None,
            receipts: None,
            history: None,
            open: None,
            grouped: None,
            audit: None,
            usage: Arc::new(InMemoryUsage::new()),
        });
    };
    let (receipts, task) = StoredReceipts::settling(store.clone());
    let outcomes = receipts.outcomes().ok_or("the receipt sink keeps no outcomes")?;
    let journaled = JournaledGrants::new(store.clone()).settled_by(outcomes);
    Ok(State {
        grants: Arc::new(journaled.clone()),
        issuer: store.clone(),
        forward: Some(Arc::new(Journaling(journaled))),
        decisions: Some(store.clone()),
        receipts: Some((receipts, task)),
        history: Some(store.clone()),
        open: Some(store.clone()),
        grouped: Some(store.clone()),
        audit: Some(store.clone()),
        usage: store,
    })
}

/// Opens the audit chain at `location` for `journal verify` and `journal export`.
pub(crate) async fn open_audit(location: &Location) -> Result<Arc<dyn AuditLog>, String> {
    if let Location::Sqlite(path) = location {
        if !path.exists() {
            return Err(format!(
                "{} does not exist: no gate has used this state yet",
                path.display()
            ));
        }
    }
    match database(location, false).await? {
        Some(store) => Ok(store),
        None => Err("--state memory keeps no audit chain".into()),
    }
}

/// Opens the journal at `location` for the `journal` commands.
pub(crate) async fn open_journal(
    location: &Location,
) -> Result<(Arc<dyn ReceiptJournal>, Arc<dyn ReceiptStore>), String> {
    if let Location::Sqlite(path) = location {
        if !path.exists() {
            return Err(format!(
                "{} does not exist: no gate has used this state yet",
                path.display()
            ));
        }
    }
    match database(location, false).await? {
        Some(store) => Ok((store.clone(), store)),
        None => Err("--state memory keeps no journal to read".into()),
    }
}

/// The database at `location` (created if needed), or `None` for `memory`; `serving` for a
/// gate that serves calls (a SQLite WAL written out for its commits, ADR 021), not for the
/// commands that look at a state.
async fn database(location: &Location, serving: bool) -> Result<Option<Arc<dyn Everything>>, String> {
    Ok(Some(match location {
        Location::Memory => return Ok(None),
        Location::Sqlite(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            let store = if serving {
                SqliteStore::open(path)
            } else {
                SqliteStore::open_for_inspection(path)
            };
            Arc::new(store.map_err(|e| format!("{}: {e}", path.display()))?)
        }
        Location::Postgres(url) => Arc::new(
            PostgresStore::connect(url, GrantLifetimes::default())
                .await
                .map_err(|e| format!("{}: {e}", without_password(url)))?,
        ),
    }))
}

/// Wraps each forward so its intent is durable before the server is sent the call (for a
/// granted call the claim wrote it in its own transaction); its outcome is left for the
/// call's record, and the two are stored together after the answer.
#[derive(Debug)]
struct Journaling(JournaledGrants);

impl ForwardWrapper for Journaling {
    fn wrap(&self, forward: Arc<dyn ToolExecutor>) -> Arc<dyn ToolExecutor> {
        Arc::new(self.0.executor(forward))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_values_and_the_password_never_shown() {
        assert_eq!(Location::parse(Some("memory")).unwrap(), Location::Memory);
        assert_eq!(
            Location::parse(Some("/tmp/g.db")).unwrap(),
            Location::Sqlite("/tmp/g.db".into())
        );
        assert!(Location::parse(Some("")).is_err());
        let pg = Location::parse(Some("postgres://gate:s3cret@db.example:5432/aml")).unwrap();
        assert!(matches!(pg, Location::Postgres(_)));
        let shown = pg.describe();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("gate@db.example:5432/aml"), "{shown}");
    }
}
