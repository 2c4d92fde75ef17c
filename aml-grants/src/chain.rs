//! The audit chain: every stored receipt record is a link — a sequence number, the previous
//! link's hash and its own hash over canonical bytes — appended in the transaction that
//! stores the record (docs/AUDIT.md defines the bytes; ADR 022 the choices).
//!
//! This module holds what needs no database: the link hash, and the walk that checks a
//! chain read back against the checkpoints a verifier was given. Signing checkpoints is the
//! gate's (it holds the key); a checkpoint reaches [`verify`] as a claim already checked.

use aml_core::canonical::to_canonical_string;
use aml_core::Sha256Digest;
use async_trait::async_trait;
use serde_json::json;

use crate::grant::StoreError;

/// The `kind` of a link's hash input (and of an exported link line).
pub const LINK_KIND: &str = "aml-audit-link/1";

/// The `prev` of link 1: 64 zeros.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The bytes a link's hash is taken over: the canonical JSON of
/// `{"at", "kind": "aml-audit-link/1", "prev", "record", "seq"}`.
pub fn link_input(seq: i64, prev: &str, at_ms: i64, record: &str) -> String {
    let input = json!({"at": at_ms, "kind": LINK_KIND, "prev": prev, "record": record, "seq": seq});
    // Integers and strings only: canonical JSON cannot refuse them.
    to_canonical_string(&input).unwrap_or_default()
}

/// A link's hash: SHA-256 of [`link_input`], lowercase hex.
pub fn link_hash(seq: i64, prev: &str, at_ms: i64, record: &str) -> String {
    Sha256Digest::of(link_input(seq, prev, at_ms, record).as_bytes()).to_string()
}

/// The chain fields of a stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Its sequence number, from 1.
    pub seq: i64,
    /// The hash of link `seq - 1` ([`GENESIS`] for link 1).
    pub prev: String,
    /// Its own hash ([`link_hash`]).
    pub hash: String,
}

/// A stored record with its chain fields, as the audit reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    /// Its row id in the store.
    pub id: i64,
    /// When it was stored, ms since the epoch (the value the link hash covers).
    pub at_ms: i64,
    /// The record text.
    pub record: String,
    /// `None` for a record stored before the store kept a chain.
    pub link: Option<Link>,
}

/// What the audit reads from a store and the checkpoints it keeps there.
///
/// ```
/// use std::sync::Mutex;
/// use aml_core::async_trait;
/// use aml_grants::{AuditLog, AuditRow, StoreError};
///
/// /// A chain in memory, for a test.
/// #[derive(Debug, Default)]
/// struct Kept(Mutex<(Vec<AuditRow>, Vec<String>)>);
///
/// #[async_trait]
/// impl AuditLog for Kept {
///     async fn audit_rows(&self) -> Result<Vec<AuditRow>, StoreError> {
///         Ok(self.0.lock().unwrap().0.clone())
///     }
///     async fn chain_tail(&self) -> Result<Option<(i64, String)>, StoreError> {
///         let kept = self.0.lock().unwrap();
///         Ok(kept.0.iter().filter_map(|r| r.link.as_ref()).last().map(|l| (l.seq, l.hash.clone())))
///     }
///     async fn add_checkpoint(&self, _seq: i64, text: &str) -> Result<(), StoreError> {
///         self.0.lock().unwrap().1.push(text.to_owned());
///         Ok(())
///     }
///     async fn checkpoints(&self) -> Result<Vec<String>, StoreError> {
///         Ok(self.0.lock().unwrap().1.clone())
///     }
/// }
/// ```
#[async_trait]
pub trait AuditLog: Send + Sync + core::fmt::Debug {
    /// Every stored record, in row-id order, with its chain fields (after waiting for the
    /// writes queued before the call).
    async fn audit_rows(&self) -> Result<Vec<AuditRow>, StoreError>;
    /// The last link's sequence number and hash; `None` before the first.
    async fn chain_tail(&self) -> Result<Option<(i64, String)>, StoreError>;
    /// Stores a signed checkpoint (its JSON text) of link `seq`.
    async fn add_checkpoint(&self, seq: i64, text: &str) -> Result<(), StoreError>;
    /// The checkpoints stored, oldest first (JSON text each).
    async fn checkpoints(&self) -> Result<Vec<String>, StoreError>;
}

/// What a checkpoint says about the chain: link `seq` has hash `hash`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointClaim {
    /// The link it names.
    pub seq: i64,
    /// That link's hash.
    pub hash: String,
    /// Where the verifier found it, for the report ("the database", a file name).
    pub source: String,
}

/// What kind of damage a verifier found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Damage {
    /// `"modified"`: the link's hash does not match its record, time, sequence number and
    /// previous hash, or its previous hash names no link.
    Modified,
    /// `"deleted"`: the sequence number is missing.
    Deleted,
    /// `"inserted"`: a link or record that the chain never had (a repeated sequence number,
    /// a record without a link after the chain began, or a link that the next one skips).
    Inserted,
    /// `"reordered"`: the record stored here hashes as the one of another link.
    Reordered,
    /// `"tail_cut"`: the chain ends before a checkpoint's link.
    TailCut,
    /// `"checkpoint_mismatch"`: a checkpoint names this link with another hash.
    CheckpointMismatch,
}

impl Damage {
    /// Every kind.
    pub const ALL: [Damage; 6] = [
        Damage::Modified,
        Damage::Deleted,
        Damage::Inserted,
        Damage::Reordered,
        Damage::TailCut,
        Damage::CheckpointMismatch,
    ];

    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Damage::Modified => "modified",
            Damage::Deleted => "deleted",
            Damage::Inserted => "inserted",
            Damage::Reordered => "reordered",
            Damage::TailCut => "tail_cut",
            Damage::CheckpointMismatch => "checkpoint_mismatch",
        }
    }
}

impl core::fmt::Display for Damage {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The first bad link a verifier found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The first bad sequence number.
    pub seq: i64,
    /// What is wrong there.
    pub damage: Damage,
    /// In words.
    pub detail: String,
}

/// A chain that checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intact {
    /// Links checked.
    pub links: u64,
    /// The last link checked (its sequence number and hash), if any.
    pub tail: Option<(i64, String)>,
    /// Records stored before the chain began (no link; not evidence of anything).
    pub unchained: u64,
    /// Checkpoints matched against a link.
    pub checkpoints: u64,
}

/// Walks the chain in `rows` (as [`AuditLog::audit_rows`] reads them) from link `since`
/// (1: the whole chain; a later one is trusted as found), and matches each checkpoint
/// against it. Records without a link are accepted only before the first link.
pub fn verify(rows: &[AuditRow], checkpoints: &[CheckpointClaim], since: i64) -> Result<Intact, Finding> {
    let first_linked = rows.iter().position(|r| r.link.is_some());
    let unchained = first_linked.unwrap_or(rows.len()) as u64;
    let mut links: Vec<(&AuditRow, &Link)> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        match &row.link {
            Some(link) => links.push((row, link)),
            None if first_linked.is_some_and(|f| i > f) => {
                // The next link by row id, or the one after the last.
                let next = rows[i..].iter().find_map(|r| r.link.as_ref().map(|l| l.seq));
                let seq = next.unwrap_or_else(|| links.last().map_or(1, |(_, l)| l.seq.saturating_add(1)));
                return Err(finding(
                    seq,
                    Damage::Inserted,
                    format!(
                        "record row {} has no link but was stored after the chain began",
                        row.id
                    ),
                ));
            }
            None => {}
        }
    }
    links.sort_by_key(|(row, link)| (link.seq, row.id));
    // From link 1, a link numbered below 1 is walked too (and refused).
    let start = if since > 1 {
        links
            .iter()
            .position(|(_, l)| l.seq >= since)
            .unwrap_or(links.len())
    } else {
        0
    };
    let walked = &links[start..];
    let mut expected = if since > 1 {
        walked.first().map_or(since, |(_, l)| l.seq)
    } else {
        1
    };
    if since > 1 && expected != since {
        return Err(finding(
            since,
            Damage::Deleted,
            format!("link {since} is missing"),
        ));
    }
    let mut prev: Option<&str> = if since > 1 { None } else { Some(GENESIS) };
    for (k, (row, link)) in walked.iter().enumerate() {
        if link.seq < expected {
            return Err(match k.checked_sub(1).map(|before| walked[before].0.id) {
                Some(first) => finding(
                    link.seq,
                    Damage::Inserted,
                    format!("link {} appears twice (rows {first} and {})", link.seq, row.id),
                ),
                None => finding(
                    expected,
                    Damage::Inserted,
                    format!(
                        "row {} is numbered {}, before the chain's first link",
                        row.id, link.seq
                    ),
                ),
            });
        }
        if link.seq > expected {
            return Err(finding(
                expected,
                Damage::Deleted,
                format!("link {expected} is missing"),
            ));
        }
        if let Some(prev) = prev {
            if link.prev != prev {
                // Link n names link n-2: link n-1 was put between them.
                let skipped = k >= 2 && link.prev == walked[k - 2].1.hash;
                return Err(if skipped {
                    finding(
                        link.seq - 1,
                        Damage::Inserted,
                        format!(
                            "link {} follows link {}: link {} was inserted",
                            link.seq,
                            link.seq - 2,
                            link.seq - 1
                        ),
                    )
                } else {
                    finding(
                        link.seq,
                        Damage::Modified,
                        format!("link {} does not name link {}", link.seq, link.seq - 1),
                    )
                });
            }
        }
        if link_hash(link.seq, &link.prev, row.at_ms, &row.record) != link.hash {
            // The record of another link, moved here?
            let moved = links.iter().find(|(other, l)| {
                other.id != row.id && link_hash(l.seq, &l.prev, other.at_ms, &row.record) == l.hash
            });
            return Err(match moved {
                Some((_, l)) => finding(
                    link.seq.min(l.seq),
                    Damage::Reordered,
                    format!(
                        "the record stored at link {} is the record of link {}",
                        link.seq, l.seq
                    ),
                ),
                None => finding(
                    link.seq,
                    Damage::Modified,
                    format!(
                        "link {}'s hash does not match its record (row {})",
                        link.seq, row.id
                    ),
                ),
            });
        }
        prev = Some(&link.hash);
        expected = link.seq.saturating_add(1);
    }
    let tail = walked.last().map(|(_, l)| (l.seq, l.hash.clone()));
    let mut matched = 0;
    for checkpoint in checkpoints {
        if checkpoint.seq < since {
            continue;
        }
        match walked.iter().find(|(_, l)| l.seq == checkpoint.seq) {
            Some((_, l)) if l.hash == checkpoint.hash => matched += 1,
            Some(_) => {
                return Err(finding(
                    checkpoint.seq,
                    Damage::CheckpointMismatch,
                    format!(
                        "the checkpoint from {} names another hash for link {}",
                        checkpoint.source, checkpoint.seq
                    ),
                ))
            }
            None => {
                let end = tail.as_ref().map_or(since - 1, |(seq, _)| *seq);
                return Err(finding(
                    end.saturating_add(1),
                    Damage::TailCut,
                    format!(
                        "the chain ends at link {end}, but the checkpoint from {} names link {}",
                        checkpoint.source, checkpoint.seq
                    ),
                ));
            }
        }
    }
    Ok(Intact {
        links: walked.len() as u64,
        tail,
        unchained,
        checkpoints: matched,
    })
}

fn finding(seq: i64, damage: Damage, detail: String) -> Finding {
    Finding { seq, damage, detail }
}

/// Links records appended in one transaction after the tail `(seq, hash)` read in it.
#[cfg(any(feature = "sqlite", test))]
#[derive(Debug)]
pub(crate) struct Appender {
    seq: i64,
    hash: String,
}

#[cfg(any(feature = "sqlite", test))]
impl Appender {
    pub(crate) fn after(tail: Option<(i64, String)>) -> Self {
        let (seq, hash) = tail.unwrap_or((0, GENESIS.to_owned()));
        Appender { seq, hash }
    }

    /// The link of the next record, not yet taken (see [`commit`](Self::commit)).
    pub(crate) fn next(&self, at_ms: i64, record: &str) -> Link {
        let seq = self.seq + 1;
        Link {
            seq,
            prev: self.hash.clone(),
            hash: link_hash(seq, &self.hash, at_ms, record),
        }
    }

    /// `link` was stored: the next record follows it.
    pub(crate) fn commit(&mut self, link: Link) {
        self.seq = link.seq;
        self.hash = link.hash;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of docs/AUDIT.md: these bytes and this hash are in the document.
    #[test]
    fn the_documented_example_hashes_as_documented() {
        let record = r#"{"record":"aml-reconcile-record/1","note":"checked: \"sent\" once"}"#;
        let input = link_input(1, GENESIS, 1796063547867, record);
        assert_eq!(
            input,
            r#"{"at":1796063547867,"kind":"aml-audit-link/1","prev":"0000000000000000000000000000000000000000000000000000000000000000","record":"{\"record\":\"aml-reconcile-record/1\",\"note\":\"checked: \\\"sent\\\" once\"}","seq":1}"#
        );
        let doc = include_str!("../../docs/AUDIT.md");
        let hash = link_hash(1, GENESIS, 1796063547867, record);
        assert!(
            doc.contains(&input),
            "docs/AUDIT.md does not show the link input bytes"
        );
        assert!(
            doc.contains(&hash),
            "docs/AUDIT.md does not show the link hash {hash}"
        );
        assert_eq!(Sha256Digest::of(input.as_bytes()).to_string(), hash);
    }

    #[test]
    fn damage_strings_are_distinct() {
        let mut seen: Vec<&str> = Damage::ALL.iter().map(|d| d.as_str()).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), Damage::ALL.len());
        assert_eq!(Damage::TailCut.to_string(), "tail_cut");
    }

    fn chain(records: &[&str]) -> Vec<AuditRow> {
        let mut appender = Appender::after(None);
        records
            .iter()
            .enumerate()
            .map(|(i, record)| {
                let link = appender.next(1000 + i as i64, record);
                appender.commit(link.clone());
                AuditRow {
                    id: i as i64 + 10,
                    at_ms: 1000 + i as i64,
                    record: (*record).to_owned(),
                    link: Some(link),
                }
            })
            .collect()
    }

    fn damage(rows: &[AuditRow], checkpoints: &[CheckpointClaim]) -> (i64, Damage) {
        let found = verify(rows, checkpoints, 1).unwrap_err();
        (found.seq, found.damage)
    }

    #[test]
    fn each_kind_of_tampering_names_the_first_bad_link() {
        let rows = chain(&["a", "b", "c", "d", "e"]);
        let intact = verify(&rows, &[], 1).unwrap();
        assert_eq!((intact.links, intact.unchained), (5, 0));

        let mut changed = rows.clone();
        changed[2].record = "C".into();
        assert_eq!(damage(&changed, &[]), (3, Damage::Modified));

        let mut deleted = rows.clone();
        deleted.remove(1);
        assert_eq!(damage(&deleted, &[]), (2, Damage::Deleted));

        let mut swapped = rows.clone();
        let (b, c) = (swapped[1].record.clone(), swapped[2].record.clone());
        swapped[1].record = c;
        swapped[2].record = b;
        assert_eq!(damage(&swapped, &[]), (2, Damage::Reordered));

        // A forged link 3, the later ones renumbered.
        let mut inserted = rows.clone();
        let forged = Link {
            seq: 3,
            prev: rows[1].link.as_ref().unwrap().hash.clone(),
            hash: link_hash(3, &rows[1].link.as_ref().unwrap().hash, 1, "forged"),
        };
        for row in &mut inserted[2..] {
            row.link.as_mut().unwrap().seq += 1;
        }
        inserted.push(AuditRow {
            id: 99,
            at_ms: 1,
            record: "forged".into(),
            link: Some(forged),
        });
        assert_eq!(damage(&inserted, &[]), (3, Damage::Inserted));

        let mut zero = rows.clone();
        zero[0].link.as_mut().unwrap().seq = 0;
        assert_eq!(damage(&zero, &[]), (1, Damage::Inserted));

        let mut unlinked = rows.clone();
        unlinked.insert(
            3,
            AuditRow {
                id: 50,
                at_ms: 1,
                record: "x".into(),
                link: None,
            },
        );
        assert_eq!(damage(&unlinked, &[]), (4, Damage::Inserted));

        let last = CheckpointClaim {
            seq: 5,
            hash: rows[4].link.as_ref().unwrap().hash.clone(),
            source: "test".into(),
        };
        assert_eq!(
            verify(&rows, std::slice::from_ref(&last), 1).unwrap().checkpoints,
            1
        );
        let cut = &rows[..3];
        assert!(
            verify(cut, &[], 1).is_ok(),
            "without a checkpoint a cut tail cannot be seen"
        );
        assert_eq!(damage(cut, std::slice::from_ref(&last)), (4, Damage::TailCut));
        let other = CheckpointClaim {
            hash: GENESIS.into(),
            ..last
        };
        assert_eq!(damage(&rows, &[other]), (5, Damage::CheckpointMismatch));
    }

    #[test]
    fn records_from_before_the_chain_are_not_tampering() {
        let mut rows = chain(&["a", "b"]);
        rows.insert(
            0,
            AuditRow {
                id: 1,
                at_ms: 5,
                record: "old".into(),
                link: None,
            },
        );
        let intact = verify(&rows, &[], 1).unwrap();
        assert_eq!((intact.links, intact.unchained), (2, 1));
        // From link 2 on, link 1 is trusted as found.
        assert_eq!(verify(&rows, &[], 2).unwrap().links, 1);
    }
}
