//! `aml-mcp-gate journal`: what the state says happened. Nothing here ever sends a call again.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use serde_json::json;

use crate::state::{self, Location};

const AFTER_HELP: &str = "\
Examples:
  aml-mcp-gate journal unresolved                  calls that may have reached the server
  aml-mcp-gate journal reconcile 42 --note \"checked: the mail was sent once\"
  aml-mcp-gate journal receipts --since 1h         receipts of the last hour
  aml-mcp-gate journal receipts --shadow           calls shadow mode let through against the policy
  aml-mcp-gate journal receipts --caller NAME      one caller's calls
  aml-mcp-gate journal verify --key audit.pub.json --checkpoints receipts.jsonl
  aml-mcp-gate journal export > chain.jsonl        links and checkpoints for an auditor

An unresolved intent is a call the gate was about to forward (its grant spent, if it had one)
when it stopped without learning the outcome: the server may or may not have acted. A gate
killed outright (SIGKILL, a crash, power loss) also leaves unresolved the calls it answered just
before (a few milliseconds' worth; more under load): their outcome and receipt are committed
together, after the answer, with the next group commit (ADR 021); such a call has no receipt
either. A clean exit (end of input, SIGTERM, SIGINT) commits every outcome and receipt first.
Each line names the tool and its resource (what the policy matched: the file, the recipient;
null for an intent stored before the state had a resource column), when the gate was
about to forward it (intent_at, UTC, and its age), the grant it spent and, for a call a person
approved, who approved it and when. proposal_sha256 is the SHA-256 of the call's canonical
proposal (tool, effect, resource, purpose and the arguments, as docs/PROTOCOL.md defines it):
the digest the approver signed and that every receipt of the call names (`journal receipts`).
The state keeps no arguments (tool input never goes into records). Check with the server (its
log, or the effect itself on that resource) whether it did the call, then reconcile it; the
note then shows in `journal receipts`. Nothing ever re-sends it.

Every stored record is a link of the audit chain (docs/AUDIT.md): `journal verify` walks it
and names the first modified, deleted, inserted or reordered link; links cut from the end
show only against a checkpoint kept elsewhere (--checkpoints).

Exit status: 0 done; 1 the state could not be read, or ID is not an unresolved intent;
2 bad usage. `journal verify`: 0 intact; 1 tampering found; 2 bad usage, or the state or a
file could not be read.";

/// `journal` and its `--state`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct JournalArgs {
    /// The state to read (as for `run`; default: the SQLite file in the user's state folder)
    #[arg(long, global = true, value_name = "PATH|postgres://…")]
    state: Option<String>,
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// Intents without an outcome (the call's outcome is unknown: it was in flight when the
    /// gate stopped, or answered just before the gate was killed), oldest first, one JSON
    /// line each
    Unresolved,
    /// Mark intent ID reconciled: the host checked what the server did
    Reconcile {
        /// The intent's id (from `journal unresolved`)
        id: i64,
        /// What the host found
        #[arg(long, value_name = "TEXT")]
        note: String,
    },
    /// Check the audit chain (every stored record is a link) and its checkpoints: exit 0
    /// intact, 1 tampering found (the first bad seq and what kind, as a JSON line), 2 bad
    /// usage or the state or a file could not be read
    Verify(crate::verify::VerifyArgs),
    /// The audit chain's links and checkpoints as JSON lines, for an auditor (docs/AUDIT.md)
    Export(crate::verify::ExportArgs),
    /// Receipt records (calls and approval decisions), oldest first, one JSON line each
    Receipts {
        /// Only those stored since: a time in ms since the epoch, or an age such as 90s,
        /// 15m, 2h, 7d
        #[arg(long, value_name = "WHEN", value_parser = parse_since)]
        since: Option<i64>,
        /// Only the calls shadow mode let through that the policy would have blocked or
        /// sent for approval (records with `would_block`)
        #[arg(long)]
        shadow: bool,
        /// Only the calls of this caller (a token's name, a JWT's subject, or `local` for
        /// stdio and calls naming no caller)
        #[arg(long, value_name = "CALLER")]
        caller: Option<String>,
    },
}

fn parse_since(text: &str) -> Result<i64, String> {
    if let Ok(ms) = text.parse::<i64>() {
        return if ms >= 0 {
            Ok(ms)
        } else {
            Err("must not be negative".into())
        };
    }
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected ms since the epoch or an age like 15m"))?;
    let seconds = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86_400),
        _ => return Err(format!("{text:?}: the unit must be s, m, h or d")),
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    Ok(now.saturating_sub(Duration::from_secs(seconds)).as_millis() as i64)
}

/// Runs one `journal` command.
pub(crate) fn main(args: JournalArgs) -> ExitCode {
    let location = match Location::parse(args.state.as_deref()) {
        Ok(location) => location,
        Err(e) => crate::cli::usage_error(clap::error::ErrorKind::InvalidValue, e),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("aml-mcp-gate: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    if let What::Verify(verify) = args.what {
        // Its own exit codes: 0 intact, 1 tampering, 2 usage or I/O.
        let checked = runtime.block_on(async {
            let log = state::open_audit(&location).await?;
            crate::verify::verify(log, verify).await
        });
        return match checked {
            Ok(Ok(())) => ExitCode::SUCCESS,
            Ok(Err(())) => ExitCode::from(1),
            Err(e) => {
                eprintln!("aml-mcp-gate journal verify: {e}");
                ExitCode::from(2)
            }
        };
    }
    match runtime.block_on(run(&location, args.what)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aml-mcp-gate journal: {e}");
            ExitCode::from(1)
        }
    }
}

/// The record `journal reconcile` appends to the receipts, so that `journal receipts` shows
/// what the host found beside what the gate recorded.
const RECONCILE_RECORD: &str = "aml-reconcile-record/1";

async fn run(location: &Location, what: What) -> Result<(), String> {
    if let What::Export(export) = what {
        return crate::verify::export(state::open_audit(location).await?, export).await;
    }
    let (journal, receipts) = state::open_journal(location).await?;
    match what {
        What::Verify(_) | What::Export(_) => return Err("not a journal read".into()),
        What::Unresolved => {
            let intents = journal.unresolved().await.map_err(|e| e.to_string())?;
            let approvals =
                approvals(receipts.as_ref(), intents.iter().any(|i| i.grant_id.is_some())).await?;
            let now = now_ms();
            for intent in intents {
                let mut line = json!({"id": intent.id, "tool": intent.tool,
                    "resource": intent.resource, "intent_at": utc(intent.intent_at_ms), "age": age(now - intent.intent_at_ms),
                    "intent_at_ms": intent.intent_at_ms, "proposal_sha256": intent.proposal_sha256,
                    "grant_id": intent.grant_id});
                if let Some(approval) = intent.grant_id.as_ref().and_then(|g| approvals.get(g)) {
                    line["approved"] = approval.clone();
                }
                println!("{line}");
            }
        }
        What::Reconcile { id, note } => {
            let intent = journal
                .unresolved()
                .await
                .map_err(|e| e.to_string())?
                .into_iter()
                .find(|i| i.id == id);
            let reconciled = journal.reconcile(id, &note).await.map_err(|e| e.to_string())?;
            let Some(intent) = intent.filter(|_| reconciled) else {
                return Err(format!(
                    "{id} is not an unresolved intent (see `journal unresolved`)"
                ));
            };
            let record = json!({"record": RECONCILE_RECORD, "intent_id": id, "tool": intent.tool,
                "resource": intent.resource, "proposal_sha256": intent.proposal_sha256, "grant_id": intent.grant_id,
                "intent_at_ms": intent.intent_at_ms, "reconciled_at_ms": now_ms(), "note": note});
            // The intent is reconciled either way; the record only lets `receipts` show it.
            // A group-committing store only queues the append: the flush makes it durable
            // before this process exits.
            let stored = async {
                receipts.append_records(&[record.to_string()]).await?;
                receipts.flush_records().await
            }
            .await;
            if let Err(e) = stored {
                eprintln!("aml-mcp-gate journal: intent {id} reconciled, but its note could not be added to the receipts: {e}");
            }
            eprintln!("aml-mcp-gate journal: intent {id} reconciled");
        }
        What::Receipts {
            since,
            shadow,
            caller,
        } => {
            for stored in receipts
                .records_since(since.unwrap_or(0))
                .await
                .map_err(|e| e.to_string())?
            {
                let record = serde_json::from_str::<serde_json::Value>(&stored.record).ok();
                let shown = (!shadow || record.as_ref().is_some_and(would_block))
                    && caller
                        .as_deref()
                        .is_none_or(|c| record.as_ref().is_some_and(|r| called_by(r, c)));
                if shown {
                    println!("{}", stored.record);
                }
            }
        }
    }
    Ok(())
}

/// Whether a stored record is a call shadow mode let through against its policy.
fn would_block(record: &serde_json::Value) -> bool {
    record.get("would_block").is_some()
}

/// Whether a stored record is a call of `caller` (a record names no caller for `local`).
fn called_by(record: &serde_json::Value, caller: &str) -> bool {
    record["record"] == "aml-call-record/1" && record["caller"].as_str().unwrap_or("local") == caller
}

/// Who approved each grant, from the approval records among the receipts (only read when an
/// intent has a grant): `{"by": KEY, "decided_at": UTC}` by grant id.
async fn approvals(
    receipts: &dyn aml_grants::ReceiptStore,
    wanted: bool,
) -> Result<std::collections::HashMap<String, serde_json::Value>, String> {
    let mut by_grant = std::collections::HashMap::new();
    if !wanted {
        return Ok(by_grant);
    }
    for stored in receipts.records_since(0).await.map_err(|e| e.to_string())? {
        let Ok(record) = serde_json::from_str::<serde_json::Value>(&stored.record) else {
            continue;
        };
        let statement = &record["statement"];
        let approved = record["record"] == "aml-approval-record/1" && record["approved"] == true;
        if let (true, Some(grant)) = (approved, record["grant_id"].as_str()) {
            let decided = statement["issued_at_ms"].as_i64().map(utc);
            by_grant.insert(
                grant.to_owned(),
                json!({"by": statement["approver_key_id"], "decided_at": decided}),
            );
        }
    }
    Ok(by_grant)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64
}

/// `ms` since the epoch as an RFC 3339 UTC time with milliseconds.
fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| format!("{ms} ms since the epoch"))
}

/// A duration in ms, as an operator reads it: `42s`, `17m`, `3h12m`, `2d4h`.
fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::{age, parse_since, utc};

    #[test]
    fn times_read_as_utc_and_ages() {
        assert_eq!(utc(1_796_063_547_867), "2026-11-30T18:32:27.867Z");
        assert_eq!(
            [
                age(-5),
                age(42_000),
                age(17 * 60_000),
                age(3 * 3_600_000 + 12 * 60_000)
            ],
            ["0s", "42s", "17m", "3h12m"]
        );
        assert_eq!(age(2 * 86_400_000 + 4 * 3_600_000), "2d4h");
    }

    #[test]
    fn since_takes_epoch_ms_or_an_age() {
        assert_eq!(parse_since("1796063547867"), Ok(1796063547867));
        let hour_ago = parse_since("1h").unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!((now - hour_ago - 3_600_000).abs() < 5_000);
        assert!(parse_since("5w").is_err());
        assert!(parse_since("-3").is_err());
        assert!(parse_since("soon").is_err());
    }
}
