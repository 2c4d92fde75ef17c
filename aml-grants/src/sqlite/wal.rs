//! Keeps the WAL file written out to the length it reaches between checkpoints, so that a
//! commit rewrites blocks the file already has instead of growing it.
//!
//! Why: a commit that grows a file makes `fdatasync` also write the file's new length
//! through the filesystem's journal, about a second flush. Measured on the project's VM
//! (ext4, docs/PERFORMANCE.md under `gate_state`): a one-row commit took 214–256 µs while
//! the WAL grew and 99–109 µs once it rewrote, against 72–95 µs for a bare `fdatasync` of a
//! rewritten block. SQLite never shortens the WAL while a connection has it open
//! (`journal_size_limit` is -1 unless set), so a WAL written out once stays so until the
//! last connection closes the file.

use std::path::Path;

use rusqlite::Connection;

/// The WAL's header and each frame's header, in bytes (SQLite's file format, section 4.1).
const WAL_HEADER: u64 = 32;
const FRAME_HEADER: u64 = 24;

/// Writes the WAL of `conn`'s database (at `path`) out to the length at which SQLite
/// checkpoints it, when it is shorter, by committing a one-row update until it is.
///
/// The filler commits are not synced one by one (`synchronous=OFF`), and they do not
/// checkpoint (that would copy other writers' frames into the database without syncing it);
/// the file is synced once at the end, and the connection's settings are put back.
pub(super) fn write_out(conn: &Connection, path: &Path) -> rusqlite::Result<()> {
    let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    let checkpoint_at: i64 = conn.query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))?;
    let (Ok(page_size), Ok(frames)) = (u64::try_from(page_size), u64::try_from(checkpoint_at)) else {
        return Ok(());
    };
    let wanted = WAL_HEADER + frames * (page_size + FRAME_HEADER);
    let wal = wal_path(path);
    let length = || std::fs::metadata(&wal).map_or(0, |m| m.len());
    if frames == 0 || length() >= wanted {
        return Ok(());
    }
    conn.execute_batch("PRAGMA synchronous=OFF; PRAGMA wal_autocheckpoint=0;")?;
    let filled = (|| {
        let mut bump = conn.prepare("UPDATE aml_wal_filler SET n = n + 1 WHERE id = 0")?;
        // One frame per commit; the bound stops a WAL that another process restarts meanwhile.
        for _ in 0..frames {
            if length() >= wanted {
                break;
            }
            bump.execute([])?;
        }
        Ok(())
    })();
    let restored = conn.execute_batch(&format!(
        "PRAGMA synchronous=FULL; PRAGMA wal_autocheckpoint={checkpoint_at};"
    ));
    filled.and(restored)?;
    if let Ok(file) = std::fs::OpenOptions::new().write(true).open(&wal) {
        // The first synced commit would otherwise flush the whole filler.
        file.sync_data().map_err(|e| {
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR_FSYNC),
                Some(format!("syncing {}: {e}", wal.display())),
            )
        })?;
    }
    Ok(())
}

/// SQLite's name for the WAL of the database file at `path`.
fn wal_path(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}
