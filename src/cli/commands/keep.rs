//! Keeping documents: `backup`, `restore` and `salvage`.

use std::path::Path;

use serde_json::json;

use super::super::output::Out;
use super::super::session::Session;
use super::super::CliError;
use crate::Engine;

pub(super) async fn backup(s: &Session, to: Option<&Path>, out: &Out) -> Result<(), CliError> {
    let to = to.map(Path::to_owned).unwrap_or_else(|| {
        crate::Engine::global()
            .config()
            .auto_backup
            .as_ref()
            .map(|a| a.path_for(s.file.path()))
            .unwrap_or_else(|| crate::engine::backup::default_path(s.file.path()))
    });
    let r = s.file.backup(&to).await?;
    out.print(&json!(r), || {
        let what = if r.incremental {
            format!("appended events {}..{}", r.from_seq, r.seq)
        } else {
            format!("wrote events 1..{}", r.seq)
        };
        let what = if r.events == 0 {
            format!("nothing new since seq {}", r.seq)
        } else {
            what
        };
        format!(
            "backup {}: {what} ({} bodies, {} bytes) in {} ms; it now holds seq {} (head {})",
            r.path.display(),
            r.bodies,
            r.bytes_written,
            r.elapsed_ms,
            r.seq,
            &r.head[..12]
        )
    });
    Ok(())
}

pub(super) fn restore(from: &Path, to: &Path, out: &Out) -> Result<(), CliError> {
    let bar = (!out.json).then(|| super::files::progress("restoring"));
    let folds = Engine::global().config().registry.folds().clone();
    let r = crate::engine::backup::restore(from, to, &folds, |done, total| {
        if let Some(b) = &bar {
            b.set_length(total);
            b.set_position(done);
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let r = r?;
    out.print(&json!(r), || {
        let mut said = format!(
            "restored {} from {}: events 1..{} (head {}), {} bodies; state digest {}",
            r.path.display(),
            from.display(),
            r.seq,
            &r.head[..12],
            r.bodies,
            r.state_digest
        );
        if r.unfinished_bytes > 0 {
            said.push_str(&format!(
                "\nnote: the last {} bytes of the backup, after its point at seq {}, hold no whole point: a backup run stopped by a crash or a power cut left them. They were skipped; the next `elfiee backup` to this file cuts them off",
                r.unfinished_bytes, r.seq
            ));
        }
        said
    });
    Ok(())
}

pub(super) fn salvage(
    damaged: &Path,
    to: &Path,
    backup: Option<&Path>,
    out: &Out,
) -> Result<(), CliError> {
    let config = Engine::global().config();
    // The automatic backup's place, when the environment names one and no --backup is given.
    let auto = config
        .auto_backup
        .as_ref()
        .map(|a| a.path_for(damaged))
        .filter(|p| p.is_file());
    let backup = backup.map(Path::to_owned).or(auto);
    let folds = config.registry.folds().clone();
    // How many events are recovered so far (how many there are is what salvage finds out).
    let bar = (!out.json).then(|| super::files::counter("salvaging"));
    let r = crate::engine::salvage::salvage(damaged, to, backup.as_deref(), &folds, |done| {
        if let Some(b) = &bar {
            b.set_position(done);
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let r = r?;
    out.print(&json!(r), || {
        let mut t = format!(
            "salvaged {} into {}: events 1..{} (head {}), {} bodies; state digest {}",
            damaged.display(),
            r.path.display(),
            r.seq,
            &r.head[..12.min(r.head.len())],
            r.bodies,
            r.state_digest
        );
        for s in &r.recovered {
            t.push_str(&format!(
                "\n  recovered {}..{} from the {}",
                s.from, s.to, s.source
            ));
        }
        if r.lost.is_empty() {
            t.push_str("\n  nothing was lost");
        }
        for l in &r.lost {
            let to =
                l.to.map_or("(its end is unknown)".to_string(), |t| t.to_string());
            let kept = if l.from <= r.seq {
                " (a salvage.lost placeholder each)"
            } else {
                ""
            };
            t.push_str(&format!("\n  LOST {}..{to}{kept}: {}", l.from, l.why));
        }
        if let Some(from) = r.rechained_from {
            t.push_str(&format!(
                "\n  events from {from} on are chained anew: their hashes differ from the damaged document's"
            ));
        }
        for n in &r.notes {
            t.push_str(&format!("\n  note: {n}"));
        }
        t
    });
    Ok(())
}
