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

An unresolved intent is a call the gate was about to forward (its grant spent, if it had one)
when it stopped without learning the outcome: the server may or may not have acted. Check
with the server, then reconcile it. Nothing ever re-sends it.

Exit status: 0 done; 1 the state could not be read, or ID is not an unresolved intent;
2 bad usage.";

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
    /// Intents without an outcome (the call's outcome is unknown), oldest first, one JSON
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
    /// Receipt records (calls and approval decisions), oldest first, one JSON line each
    Receipts {
        /// Only those stored since: a time in ms since the epoch, or an age such as 90s,
        /// 15m, 2h, 7d
        #[arg(long, value_name = "WHEN", value_parser = parse_since)]
        since: Option<i64>,
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
    match runtime.block_on(run(&location, args.what)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aml-mcp-gate journal: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run(location: &Location, what: What) -> Result<(), String> {
    let (journal, receipts) = state::open_journal(location).await?;
    match what {
        What::Unresolved => {
            for intent in journal.unresolved().await.map_err(|e| e.to_string())? {
                println!(
                    "{}",
                    json!({"id": intent.id, "proposal_sha256": intent.proposal_sha256,
                           "grant_id": intent.grant_id, "tool": intent.tool,
                           "intent_at_ms": intent.intent_at_ms})
                );
            }
        }
        What::Reconcile { id, note } => {
            if !journal.reconcile(id, &note).await.map_err(|e| e.to_string())? {
                return Err(format!(
                    "{id} is not an unresolved intent (see `journal unresolved`)"
                ));
            }
            eprintln!("aml-mcp-gate journal: intent {id} reconciled");
        }
        What::Receipts { since } => {
            for stored in receipts
                .records_since(since.unwrap_or(0))
                .await
                .map_err(|e| e.to_string())?
            {
                println!("{}", stored.record);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_since;

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
