//! Who calls, and how much they have called: the facts a policy decides on beside the
//! proposal (the Cedar principal, and `context.usage` for budgets; docs/POLICY.md).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::hooks::{async_trait, UsageError};

/// Longest caller id, in bytes.
pub const MAX_CALLER_BYTES: usize = 256;

/// Who makes a call, as the host knows them: `local` for the host's own agent (stdio), a
/// bearer token's name over HTTP. It is the Cedar principal (`Caller::"<id>"`) and what
/// budgets are counted per.
///
/// ```
/// use aml_core::Caller;
/// assert_eq!(Caller::local().id(), "local");
/// assert_eq!(Caller::new("ci-agent").unwrap().id(), "ci-agent");
/// assert!(Caller::new("").is_err());
/// assert!(Caller::new("a\u{0}b").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Caller(Id);

/// `local` needs no allocation: it is every stdio call's caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Id {
    Local,
    Named(Arc<str>),
}

const LOCAL: &str = "local";

impl Caller {
    /// The host's own agent: the caller on stdio, and of every call that names none.
    pub const fn local() -> Self {
        Caller(Id::Local)
    }

    /// A caller named `id`: not blank, at most [`MAX_CALLER_BYTES`], no control characters.
    pub fn new(id: &str) -> Result<Self, String> {
        if id.trim().is_empty() {
            return Err("a caller id must not be blank".into());
        }
        if id.len() > MAX_CALLER_BYTES {
            return Err(format!("a caller id is at most {MAX_CALLER_BYTES} bytes"));
        }
        if id.chars().any(char::is_control) {
            return Err("a caller id must not hold control characters".into());
        }
        if id == LOCAL {
            return Ok(Caller::local());
        }
        Ok(Caller(Id::Named(Arc::from(id))))
    }

    /// The id.
    pub fn id(&self) -> &str {
        match &self.0 {
            Id::Local => LOCAL,
            Id::Named(id) => id,
        }
    }

    /// Whether this is [`Caller::local`].
    pub fn is_local(&self) -> bool {
        self.0 == Id::Local
    }
}

impl Default for Caller {
    fn default() -> Self {
        Caller::local()
    }
}

impl core::fmt::Display for Caller {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.id())
    }
}

/// How many calls of one tool one caller had dispatched in the last minute, hour and day:
/// Cedar's `context.usage`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// In the last 60 seconds.
    #[serde(default)]
    pub minute: u64,
    /// In the last 3,600 seconds.
    #[serde(default)]
    pub hour: u64,
    /// In the last 86,400 seconds.
    #[serde(default)]
    pub day: u64,
}

/// The windows a [`Usage`] counts over.
pub const USAGE_WINDOWS: [Duration; 3] = [
    Duration::from_secs(60),
    Duration::from_secs(3_600),
    Duration::from_secs(86_400),
];

/// What [`UsageLedger::count_if`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// The usage was still what the plan saw: this call is counted and may go on.
    Counted,
    /// Other calls were counted (or left a window) since: nothing was counted, and the
    /// usage is now this. The boundary decides again.
    Changed(Usage),
}

/// Where a host keeps each caller's dispatched calls, for policies that read
/// `context.usage` (budgets). The boundary reads the usage before it plans, and counts the
/// call with [`count_if`](Self::count_if) after approval, the claim and the re-checks,
/// just before the tool: the check and the count are one atomic step, so calls racing at a
/// budget's edge over-run it by none.
///
/// ```
/// use std::sync::Mutex;
/// use aml_core::{async_trait, Caller, Counted, Usage, UsageError, UsageLedger};
///
/// /// One counter for everything, never forgetting (a host that budgets per process life).
/// #[derive(Debug, Default)]
/// struct Lifetime(Mutex<u64>);
///
/// #[async_trait]
/// impl UsageLedger for Lifetime {
///     async fn usage(&self, _: &Caller, _: &str) -> Result<Usage, UsageError> {
///         let n = *self.0.lock().unwrap();
///         Ok(Usage { minute: n, hour: n, day: n })
///     }
///     async fn count_if(&self, _: &Caller, _: &str, seen: Usage) -> Result<Counted, UsageError> {
///         let mut n = self.0.lock().unwrap();
///         if seen.day != *n {
///             return Ok(Counted::Changed(Usage { minute: *n, hour: *n, day: *n }));
///         }
///         *n += 1;
///         Ok(Counted::Counted)
///     }
/// }
/// ```
#[async_trait]
pub trait UsageLedger: Send + Sync + core::fmt::Debug {
    /// `caller`'s dispatched calls of `tool` in each window, now.
    async fn usage(&self, caller: &Caller, tool: &str) -> Result<Usage, UsageError>;

    /// Counts one call of `tool` by `caller` if its usage is still `seen`, atomically with
    /// that check; otherwise counts nothing and says what it is now.
    async fn count_if(&self, caller: &Caller, tool: &str, seen: Usage) -> Result<Counted, UsageError>;
}

/// A ledger in this process's memory (one gate, `--state memory`, tests): forgotten at
/// exit, not shared.
///
/// ```
/// use aml_core::{Caller, Counted, InMemoryUsage, Usage, UsageLedger};
/// let ledger = InMemoryUsage::new();
/// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// let me = Caller::local();
/// let seen = rt.block_on(ledger.usage(&me, "send")).unwrap();
/// assert_eq!(rt.block_on(ledger.count_if(&me, "send", seen)).unwrap(), Counted::Counted);
/// // A second call that planned on the same usage lost the race: told, not counted.
/// let now = Usage { minute: 1, hour: 1, day: 1 };
/// assert_eq!(rt.block_on(ledger.count_if(&me, "send", seen)).unwrap(), Counted::Changed(now));
/// ```
#[derive(Debug, Default)]
pub struct InMemoryUsage {
    calls: Mutex<HashMap<(Caller, String), VecDeque<Instant>>>,
}

impl InMemoryUsage {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }
}

/// The usage of `times` (oldest first) at `now`, after forgetting what left the last window.
/// Each count is a binary search: a busy caller's call costs O(log n), not O(n).
fn windowed(times: &mut VecDeque<Instant>, now: Instant) -> Usage {
    let within = |window: Duration| now.checked_sub(window);
    if let Some(cut) = within(USAGE_WINDOWS[2]) {
        let gone = times.partition_point(|at| *at <= cut);
        times.drain(..gone);
    }
    let count = |window| match within(window) {
        Some(cut) => (times.len() - times.partition_point(|at| *at <= cut)) as u64,
        None => times.len() as u64,
    };
    Usage {
        minute: count(USAGE_WINDOWS[0]),
        hour: count(USAGE_WINDOWS[1]),
        day: times.len() as u64,
    }
}

#[async_trait]
impl UsageLedger for InMemoryUsage {
    async fn usage(&self, caller: &Caller, tool: &str) -> Result<Usage, UsageError> {
        let mut calls = self
            .calls
            .lock()
            .map_err(|_| UsageError::new("usage ledger lock poisoned"))?;
        let now = Instant::now();
        Ok(match calls.get_mut(&(caller.clone(), tool.to_owned())) {
            Some(times) => windowed(times, now),
            None => Usage::default(),
        })
    }

    async fn count_if(&self, caller: &Caller, tool: &str, seen: Usage) -> Result<Counted, UsageError> {
        let mut calls = self
            .calls
            .lock()
            .map_err(|_| UsageError::new("usage ledger lock poisoned"))?;
        let now = Instant::now();
        let times = calls.entry((caller.clone(), tool.to_owned())).or_default();
        let usage = windowed(times, now);
        if usage != seen {
            return Ok(Counted::Changed(usage));
        }
        times.push_back(now);
        Ok(Counted::Counted)
    }
}

/// The client software as it named itself (MCP `initialize`: `clientInfo`): shown to the
/// person asked to approve, never decided on (a client names itself as it likes).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientInfo {
    /// `clientInfo.name`.
    pub name: String,
    /// `clientInfo.version`.
    pub version: String,
}

/// What a call is decided on beside the proposal: who calls, and (for policies that read
/// `context.usage`) how much they have called this tool; and, for the approver's eyes only,
/// the client software they call from.
///
/// ```
/// use aml_core::{CallFacts, Caller, ClientInfo, Usage};
/// let facts = CallFacts::default();
/// assert!(facts.caller.is_local() && facts.usage.is_none() && facts.client.is_none());
/// let ci = CallFacts::of(Caller::new("ci").unwrap())
///     .with_usage(Usage { minute: 1, hour: 2, day: 3 })
///     .with_client(ClientInfo { name: "claude-code".into(), version: "2.1.0".into() });
/// assert_eq!(ci.usage.map(|u| u.hour), Some(2));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallFacts {
    /// The caller: the Cedar principal.
    pub caller: Caller,
    /// The caller's usage of the tool, when the policy reads it; `None` leaves
    /// `context.usage` out, so a policy that reads it fails to evaluate and denies.
    pub usage: Option<Usage>,
    /// The client software, as it named itself; never part of a decision.
    pub client: Option<Arc<ClientInfo>>,
}

impl CallFacts {
    /// The facts of a call by `caller`, usage not yet read.
    pub fn of(caller: Caller) -> Self {
        CallFacts {
            caller,
            usage: None,
            client: None,
        }
    }

    /// With the caller's usage.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// With the usage, when one is given.
    pub fn with_usage_if(mut self, usage: Option<Usage>) -> Self {
        self.usage = usage;
        self
    }

    /// With the client software the call came from.
    pub fn with_client(mut self, client: ClientInfo) -> Self {
        self.client = Some(Arc::new(client));
        self
    }
}

/// The facts of most calls: `local`, no usage, no client named.
static PLAIN: CallFacts = CallFacts {
    caller: Caller::local(),
    usage: None,
    client: None,
};

/// [`CallFacts`] as plans and outcomes carry them: one word for the facts of most calls
/// (`local`, no usage), boxed otherwise, so a call without callers or budgets moves no more
/// than it did before they existed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Facts(Option<Box<CallFacts>>);

impl Facts {
    pub(crate) fn new(facts: CallFacts) -> Self {
        if facts == PLAIN {
            return Facts(None);
        }
        Facts(Some(Box::new(facts)))
    }

    pub(crate) fn get(&self) -> &CallFacts {
        self.0.as_deref().unwrap_or(&PLAIN)
    }

    /// Whether these are the facts of most calls (`local`, no usage).
    pub(crate) fn is_plain(&self) -> bool {
        self.0.is_none()
    }

    /// The facts of most calls (`local`, no usage).
    pub(crate) fn plain() -> &'static CallFacts {
        &PLAIN
    }

    pub(crate) fn into_inner(self) -> CallFacts {
        self.0.map_or_else(CallFacts::default, |facts| *facts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_forget_what_left_them() {
        let now = Instant::now();
        let Some(two_days_ago) = now.checked_sub(Duration::from_secs(2 * 86_400)) else {
            return; // a monotonic clock this young cannot hold the test's past
        };
        let at = |secs_ago: u64| now - Duration::from_secs(secs_ago);
        let mut times: VecDeque<Instant> = [two_days_ago, at(7_200), at(600), at(30), at(1)].into();
        let usage = windowed(&mut times, now);
        assert_eq!(
            usage,
            Usage {
                minute: 2,
                hour: 3,
                day: 4
            }
        );
        assert_eq!(times.len(), 4, "the call two days ago is forgotten");
    }

    #[test]
    fn caller_ids_are_checked() {
        assert!(Caller::new(&"a".repeat(MAX_CALLER_BYTES)).is_ok());
        assert!(Caller::new(&"a".repeat(MAX_CALLER_BYTES + 1)).is_err());
        assert!(Caller::new("  ").is_err());
        assert!(Caller::new("line\nbreak").is_err());
        assert!(Caller::local().is_local() && !Caller::new("alice").unwrap().is_local());
        assert_eq!(
            Caller::new("local").unwrap(),
            Caller::local(),
            "one spelling of local"
        );
    }

    #[test]
    fn usage_reads_strictly() {
        let usage: Usage = serde_json::from_str(r#"{"hour": 20}"#).unwrap();
        assert_eq!(
            usage,
            Usage {
                minute: 0,
                hour: 20,
                day: 0
            }
        );
        assert!(serde_json::from_str::<Usage>(r#"{"hours": 20}"#).is_err());
        assert!(serde_json::from_str::<Usage>(r#"{"hour": -1}"#).is_err());
    }
}
