//! `journal verify` and `journal export`: the audit chain checked, or written out for an
//! auditor (docs/AUDIT.md).

use std::path::PathBuf;
use std::sync::Arc;

use aml_approval::{KeyError, Keyring};
use aml_grants::{AuditLog, AuditRow, Damage, Finding, LINK_KIND};
use clap::Args;
use serde_json::json;

use crate::audit::{Checkpoint, CHECKPOINT_KIND};

/// `journal verify`'s options.
#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The gate's audit public key: a keyring ({"keys": [{"key_id", "public_key"}]}) or one
    /// entry as `aml-approval public` prints it; repeat for several gates. Without it the
    /// chain's links are checked, and checkpoints only against them (unsigned)
    #[arg(long, value_name = "PUBLIC.json")]
    key: Vec<PathBuf>,
    /// Checkpoints kept outside the database (the --receipts log, an export): every
    /// aml-audit-checkpoint/1 line of the file is checked; repeatable. Only these reveal
    /// links cut from the end of the chain together with the checkpoints stored after them
    #[arg(long, value_name = "FILE")]
    checkpoints: Vec<PathBuf>,
    /// Start at link SEQ, taking it as found (for a chain checked before up to there)
    #[arg(long, value_name = "SEQ", default_value_t = 1, value_parser = clap::value_parser!(i64).range(1..))]
    since: i64,
}

/// `journal export`'s options.
#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// Only links from SEQ on (and no record from before the chain)
    #[arg(long, value_name = "SEQ", default_value_t = 1, value_parser = clap::value_parser!(i64).range(1..))]
    since: i64,
}

/// Why verify could not run (exit 2).
type Unusable = String;

/// What `verify` found: `Ok` intact (exit 0), `Err` the first damage (exit 1).
pub(crate) async fn verify(log: Arc<dyn AuditLog>, args: VerifyArgs) -> Result<Result<(), ()>, Unusable> {
    let keys = read_keys(&args.key)?;
    let mut checkpoints = Vec::new();
    let mut refused: Vec<Finding> = Vec::new();
    let stored = log.checkpoints().await.map_err(|e| e.to_string())?;
    for (i, text) in stored.iter().enumerate() {
        match Checkpoint::parse(text, "the database") {
            Ok(Some(checkpoint)) => checkpoints.push(checkpoint),
            Ok(None) | Err(_) => refused.push(Finding {
                seq: 1,
                damage: Damage::Modified,
                detail: format!("stored checkpoint {} is not a checkpoint", i + 1),
            }),
        }
    }
    for path in &args.checkpoints {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let source = path.display().to_string();
        // JSON lines (the --receipts log, an export), or log lines that carry one (the
        // gate's stderr: `… audit checkpoint {…}`); lines without a checkpoint are skipped.
        let marked = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.contains(CHECKPOINT_KIND));
        for (n, line) in marked {
            let json = match (line.find('{'), line.rfind('}')) {
                (Some(start), Some(end)) if start < end => &line[start..=end],
                _ => line,
            };
            match Checkpoint::parse(json, &source) {
                Ok(Some(checkpoint)) => checkpoints.push(checkpoint),
                Ok(None) => {}
                Err(e) => return Err(format!("{source}:{}: {e}", n + 1)),
            }
        }
    }
    if let Some(keys) = &keys {
        for checkpoint in &checkpoints {
            if let Some(why) = checkpoint.refused_by(keys) {
                refused.push(Finding {
                    seq: checkpoint.claim.seq,
                    damage: Damage::Modified,
                    detail: format!(
                        "the checkpoint of link {} from {} is refused ({why})",
                        checkpoint.claim.seq, checkpoint.claim.source
                    ),
                });
            }
        }
    }
    let accepted: Vec<_> = checkpoints
        .iter()
        .filter(|c| keys.as_ref().is_none_or(|k| c.refused_by(k).is_none()))
        .map(|c| c.claim.clone())
        .collect();
    let rows = log.audit_rows().await.map_err(|e| e.to_string())?;
    let walked = aml_grants::verify(&rows, &accepted, args.since);
    let first_refused = refused.into_iter().min_by_key(|f| f.seq);
    let found = match (walked, first_refused) {
        (Ok(intact), None) => {
            let line = json!({"result": "intact", "links": intact.links,
                "last_seq": intact.tail.as_ref().map(|t| t.0), "last_hash": intact.tail.as_ref().map(|t| &t.1),
                "checkpoints": intact.checkpoints, "signatures_checked": keys.is_some(),
                "unchained_before_seq_1": intact.unchained});
            println!("{line}");
            let unchained = match intact.unchained {
                0 => String::new(),
                n => format!("; {n} records unchained, before seq 1 (stored before the chain began)"),
            };
            let unsigned = if keys.is_some() {
                ""
            } else {
                " (signatures not checked: no --key)"
            };
            eprintln!(
                "aml-mcp-gate journal verify: intact: {} links, {} checkpoints matched{unsigned}{unchained}",
                intact.links, intact.checkpoints
            );
            return Ok(Ok(()));
        }
        (Err(chain), Some(checkpoint)) => {
            if checkpoint.seq < chain.seq {
                (checkpoint, "checkpoint_refused")
            } else {
                (chain, "")
            }
        }
        (Err(chain), None) => (chain, ""),
        (Ok(_), Some(checkpoint)) => (checkpoint, "checkpoint_refused"),
    };
    let (finding, refusal) = found;
    let kind = if refusal.is_empty() {
        finding.damage.as_str()
    } else {
        refusal
    };
    println!(
        "{}",
        json!({"result": "tampered", "seq": finding.seq, "kind": kind, "detail": finding.detail})
    );
    eprintln!(
        "aml-mcp-gate journal verify: tampering at seq {}: {kind}: {}",
        finding.seq, finding.detail
    );
    Ok(Err(()))
}

/// Reads every `--key` file into one keyring; `None` without any.
fn read_keys(paths: &[PathBuf]) -> Result<Option<Keyring>, Unusable> {
    if paths.is_empty() {
        return Ok(None);
    }
    let mut entries = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read --key {}: {e}", path.display()))?;
        let one = match Keyring::from_json(&text) {
            Err(KeyError::EntryNotKeyring) => format!("{{\"keys\": [{text}]}}"),
            Err(e) => return Err(format!("--key {}: {e}", path.display())),
            Ok(_) => text,
        };
        let value: serde_json::Value =
            serde_json::from_str(&one).map_err(|e| format!("--key {}: {e}", path.display()))?;
        entries.extend(value["keys"].as_array().cloned().unwrap_or_default());
    }
    let ring = json!({"keys": entries}).to_string();
    Keyring::from_json(&ring)
        .map(Some)
        .map_err(|e| format!("--key: {e}"))
}

/// Writes every link (and record from before the chain) and every checkpoint as JSON lines.
pub(crate) async fn export(log: Arc<dyn AuditLog>, args: ExportArgs) -> Result<(), String> {
    let rows = log.audit_rows().await.map_err(|e| e.to_string())?;
    let mut linked: Vec<&AuditRow> = rows.iter().filter(|r| r.link.is_some()).collect();
    linked.sort_by_key(|r| (r.link.as_ref().map_or(0, |l| l.seq), r.id));
    if args.since == 1 {
        for row in rows.iter().filter(|r| r.link.is_none()) {
            println!(
                "{}",
                json!({"kind": "aml-unchained-record/1", "id": row.id, "at": row.at_ms, "record": row.record})
            );
        }
    }
    for row in linked {
        let Some(link) = &row.link else { continue };
        if link.seq < args.since {
            continue;
        }
        let line = json!({"at": row.at_ms, "hash": link.hash, "kind": LINK_KIND, "prev": link.prev,
                          "record": row.record, "seq": link.seq});
        println!(
            "{}",
            aml_core::canonical::to_canonical_string(&line).map_err(|e| e.to_string())?
        );
    }
    for text in log.checkpoints().await.map_err(|e| e.to_string())? {
        println!("{text}");
    }
    Ok(())
}
