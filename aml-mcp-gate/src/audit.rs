//! `--audit-key`: signed checkpoints of the state's audit chain (docs/AUDIT.md, ADR 022).
//!
//! The chain itself is kept by the store whatever the flags (hashes only); with a key, the
//! gate signs a checkpoint — the last link's sequence number and hash — every `--audit-every`
//! links or `--audit-interval` seconds, and once more at a clean exit. Each is stored in the
//! state and also written to the log stream (the `--receipts` file, and the gate's log on
//! stderr), so that a copy lives outside the database.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aml_approval::{ApproverKey, Keyring};
use aml_core::canonical::to_canonical_string;
use aml_grants::{AuditLog, CheckpointClaim};
use serde_json::{json, Map, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The `kind` of a checkpoint.
pub(crate) const CHECKPOINT_KIND: &str = "aml-audit-checkpoint/1";

/// How often the tail is looked at, at most.
const POLL: Duration = Duration::from_secs(1);

/// The signed part of a checkpoint, as canonical JSON: every field but `signature`.
fn signing_input(fields: &Map<String, Value>) -> Result<String, String> {
    let mut signed = fields.clone();
    signed.remove("signature");
    to_canonical_string(&Value::Object(signed)).map_err(|e| e.to_string())
}

/// A signed checkpoint of link `seq` (hash `hash`), as one JSON line.
pub(crate) fn sign(key: &ApproverKey, seq: i64, hash: &str, at_ms: i64) -> Result<String, String> {
    let Value::Object(mut fields) =
        json!({"at": at_ms, "hash": hash, "key_id": key.key_id(), "kind": CHECKPOINT_KIND, "seq": seq})
    else {
        return Err("a checkpoint is an object".into());
    };
    let signature = key.sign_message(signing_input(&fields)?.as_bytes());
    fields.insert("signature".into(), Value::String(signature));
    to_canonical_string(&Value::Object(fields)).map_err(|e| e.to_string())
}

/// A checkpoint read back: what it claims and who says it signed it.
#[derive(Debug, Clone)]
pub(crate) struct Checkpoint {
    pub(crate) claim: CheckpointClaim,
    key_id: String,
    signed: String,
    signature: String,
}

impl Checkpoint {
    /// Reads one checkpoint line; `Ok(None)` for a line of another kind (a record).
    pub(crate) fn parse(text: &str, source: &str) -> Result<Option<Checkpoint>, String> {
        let value = aml_core::strict::parse_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let Value::Object(fields) = value else {
            return Ok(None);
        };
        if fields.get("kind").and_then(Value::as_str) != Some(CHECKPOINT_KIND) {
            return Ok(None);
        }
        let text_field = |name: &str| {
            fields
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("a checkpoint without a string {name:?}"))
        };
        let seq = fields
            .get("seq")
            .and_then(Value::as_i64)
            .filter(|s| *s >= 1)
            .ok_or("a checkpoint without a positive integer \"seq\"")?;
        if fields.get("at").and_then(Value::as_i64).is_none() || fields.len() != 6 {
            return Err("a checkpoint has exactly at, hash, key_id, kind, seq, signature".into());
        }
        Ok(Some(Checkpoint {
            claim: CheckpointClaim {
                seq,
                hash: text_field("hash")?,
                source: source.to_owned(),
            },
            key_id: text_field("key_id")?,
            signature: text_field("signature")?,
            signed: signing_input(&fields)?,
        }))
    }

    /// Why `keys` refuse this checkpoint, if they do.
    pub(crate) fn refused_by(&self, keys: &Keyring) -> Option<String> {
        keys.verify_message(&self.key_id, self.signed.as_bytes(), &self.signature)
            .err()
            .map(|e| format!("key id {:?}: {e}", self.key_id))
    }
}

/// Reads `--audit-key` (a key file as `aml-approval keygen` writes it).
pub(crate) fn read_key(path: &Path) -> Result<ApproverKey, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read --audit-key {}: {e}", path.display()))?;
    ApproverKey::from_json(&text).map_err(|e| format!("--audit-key {}: {e}", path.display()))
}

/// When checkpoints are written.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    /// After this many new links.
    pub(crate) every: u64,
    /// Or after this long, when there is a new link.
    pub(crate) interval: Duration,
}

/// The task that writes checkpoints; [`finish`](Self::finish) writes the last one.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Checkpointer {
    /// Starts writing checkpoints of `log`'s chain, signed with `key`; each also goes to
    /// `stream` (the `--receipts` file) when given.
    pub(crate) fn start(
        log: Arc<dyn AuditLog>,
        key: ApproverKey,
        schedule: Schedule,
        stream: Option<PathBuf>,
    ) -> Self {
        let (stop, stopped) = watch::channel(false);
        let writer = Writer {
            log,
            key,
            stream,
            last: 0,
        };
        let task = tokio::spawn(writer.run(schedule, stopped));
        Checkpointer { stop, task }
    }

    /// Writes a checkpoint of the chain as it is now (the gate is exiting cleanly, every
    /// record flushed) and stops.
    pub(crate) async fn finish(self) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .is_err()
        {
            eprintln!("aml-mcp-gate: the last audit checkpoint was not written in time");
        }
    }
}

struct Writer {
    log: Arc<dyn AuditLog>,
    key: ApproverKey,
    stream: Option<PathBuf>,
    /// The last link checkpointed.
    last: i64,
}

impl Writer {
    async fn run(mut self, schedule: Schedule, mut stopped: watch::Receiver<bool>) {
        let mut since = Instant::now();
        // At start: a checkpoint of the chain as this gate found it.
        let mut due = true;
        loop {
            if let Ok(Some((seq, hash))) = self.tail().await {
                let new = u64::try_from(seq - self.last).unwrap_or(0);
                let timely = since.elapsed() >= schedule.interval;
                if new > 0 && (due || new >= schedule.every || timely) {
                    self.write(seq, &hash).await;
                    since = Instant::now();
                }
            }
            due = false;
            if *stopped.borrow() {
                return;
            }
            let wait = POLL.min(schedule.interval);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stopped.changed() => due = true,
            }
        }
    }

    async fn tail(&self) -> Result<Option<(i64, String)>, ()> {
        self.log.chain_tail().await.map_err(|e| {
            tracing::error!(error = %e, "audit: cannot read the chain's tail");
        })
    }

    async fn write(&mut self, seq: i64, hash: &str) {
        let line = match sign(&self.key, seq, hash, now_ms()) {
            Ok(line) => line,
            Err(e) => return tracing::error!(error = %e, "audit: cannot sign a checkpoint"),
        };
        if let Err(e) = self.log.add_checkpoint(seq, &line).await {
            tracing::error!(error = %e, "audit: cannot store a checkpoint");
        }
        tracing::info!("audit checkpoint {line}");
        if let Some(path) = &self.stream {
            if let Err(e) = append_line(path, &line) {
                tracing::error!(error = %e, path = %path.display(), "audit: cannot write a checkpoint to the log");
            }
        }
        self.last = seq;
    }
}

/// One line, in one write, at the end of `path` (O_APPEND: lines of the receipt log's own
/// writer are never split).
fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    file.write_all(format!("{line}\n").as_bytes())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of docs/AUDIT.md (a published seed: an example, never a key to use).
    #[test]
    fn the_documented_checkpoint_is_what_the_gate_writes() {
        let seed: String = (0u8..32).map(|b| format!("{b:02x}")).collect();
        let key = ApproverKey::from_json(&json!({"key_id": "example-audit", "secret_key": seed}).to_string())
            .unwrap();
        let record = r#"{"record":"aml-reconcile-record/1","note":"checked: \"sent\" once"}"#;
        let hash = aml_grants::link_hash(1, aml_grants::GENESIS, 1796063547867, record);
        let line = sign(&key, 1, &hash, 1796063547900).unwrap();
        let doc = include_str!("../../docs/AUDIT.md");
        let checkpoint = Checkpoint::parse(&line, "doc").unwrap().unwrap();
        assert!(
            doc.contains(&checkpoint.signed),
            "docs/AUDIT.md lacks the signing input {}",
            checkpoint.signed
        );
        assert!(doc.contains(&line), "docs/AUDIT.md lacks the checkpoint {line}");
        assert!(
            doc.contains(&key.public_key_hex()),
            "docs/AUDIT.md lacks the public key"
        );
        let ring = Keyring::new().with_approver(&key).unwrap();
        assert_eq!(checkpoint.refused_by(&ring), None);
    }

    #[test]
    fn a_checkpoint_verifies_with_its_key_only() {
        let key = ApproverKey::generate("gate-audit").unwrap();
        let line = sign(&key, 7, &"ab".repeat(32), 1_796_063_547_867).unwrap();
        let checkpoint = Checkpoint::parse(&line, "test").unwrap().unwrap();
        assert_eq!(
            (checkpoint.claim.seq, checkpoint.claim.hash.as_str()),
            (7, "ab".repeat(32).as_str())
        );
        let ring = Keyring::new().with_approver(&key).unwrap();
        assert_eq!(checkpoint.refused_by(&ring), None);
        let other = Keyring::new()
            .with_approver(&ApproverKey::generate("gate-audit").unwrap())
            .unwrap();
        assert!(checkpoint.refused_by(&other).is_some());
        let moved = line.replace("\"seq\":7", "\"seq\":8");
        let moved = Checkpoint::parse(&moved, "test").unwrap().unwrap();
        assert!(moved.refused_by(&ring).is_some(), "the signature covers seq");
        assert!(Checkpoint::parse(r#"{"record":"aml-call-record/1"}"#, "t")
            .unwrap()
            .is_none());
        assert!(Checkpoint::parse(r#"{"kind":"aml-audit-checkpoint/1","seq":1}"#, "t").is_err());
    }
}
