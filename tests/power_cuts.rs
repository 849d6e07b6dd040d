//! Power cuts (issue 39): CLI processes write to a document on the lazy filesystem
//! (`lazyfs/`), the power is cut at a random instant (every write not yet `fsync`ed lost, or a
//! seeded random part of them kept and the last one torn at a 512-byte boundary), the disk is
//! mounted again, and then: the document opens with no manual step, `verify` passes, and every
//! command a process acknowledged (exit 0) before the cut is in the log.
//!
//! `ELFIEE_POWER_CUTS` sets the cuts per scenario (default: [`CI_CUTS`]); `scripts/power-cuts N`
//! runs N and prints the figures. `ELFIEE_POWER_SEED` replays a campaign. Without root or
//! `/dev/fuse` every test says so loudly and stops (it does not pass as if it had tested).

mod power;

use power::{Campaign, Scenario};

/// Cuts per scenario in `scripts/test`: 50 each for the writers (with and without an owner, and
/// again for P1) and the export (three times: whole files, no acknowledged export lost, no body
/// lost), fewer for the backup, restore, salvage, agent undo and sync ingest (365 in all,
/// about six minutes run one after the other). Every campaign fails on a document that does not open with no
/// manual step; the tests named by a finding (P1, P3) were its strict twins while it was
/// known and unmended.
const CI_CUTS: u32 = 50;

#[test]
fn concurrent_cli_writers_lose_no_acknowledged_command_at_a_power_cut() {
    Campaign::run(Scenario::Writers { serve: false }, CI_CUTS);
}

#[test]
fn concurrent_cli_writers_through_a_serve_owner_lose_no_acknowledged_command_at_a_power_cut() {
    Campaign::run(Scenario::Writers { serve: true }, CI_CUTS);
}

/// P1 (issue 39, found by this harness, 5 cuts in 300 before it was mended): sled's snapshot,
/// written as it opens, pointed at segments reused since or data never synced after a cut
/// (see `engine/src/log/sled_files.rs`).
#[test]
fn a_serve_owner_leaves_a_document_that_opens_after_every_power_cut() {
    let f = Campaign::run(Scenario::Writers { serve: true }, CI_CUTS);
    assert_eq!(f.p1, 0, "documents unopenable after a cut (P1)");
}

/// Never torn, whatever the cut: checked here. That an acknowledged export survives the cut
/// (P2) and that no body goes missing (P3) are checked by the tests below.
#[test]
fn dir_export_leaves_every_project_file_whole_at_a_power_cut() {
    Campaign::run(Scenario::Export, CI_CUTS);
}

#[test]
fn an_acknowledged_dir_export_survives_a_power_cut() {
    // P2 (found by this harness): the export's rename, and the folders it made, were not
    // synced, so a cut could undo an acknowledged export while the document kept its hash.
    let f = Campaign::run(Scenario::Export, CI_CUTS);
    assert_eq!(
        (f.export_lost, f.refused_after_cut),
        (0, 0),
        "acknowledged exports lost at a cut, paths the next export refused"
    );
}

/// P3 (issue 39, found by this harness, about 1 export cut in 250 before it was mended):
/// bodies synced after a hole a cut left in the content pack were never re-indexed.
#[test]
fn no_body_goes_missing_after_a_power_cut() {
    let f = Campaign::run(Scenario::Export, CI_CUTS);
    assert_eq!(f.p3, 0, "documents missing bodies (P3)");
}

#[test]
fn a_backup_appending_at_a_power_cut_still_restores_to_its_last_acknowledged_point() {
    Campaign::run(Scenario::Backup, CI_CUTS / 2);
}

#[test]
fn a_restore_cut_part_way_leaves_a_whole_document_once_acknowledged() {
    Campaign::run(Scenario::Restore { salvage: false }, CI_CUTS / 5);
}

#[test]
fn a_salvage_cut_part_way_leaves_a_whole_document_once_acknowledged() {
    Campaign::run(Scenario::Restore { salvage: true }, CI_CUTS / 5);
}

/// `agent undo` writes project files back: each stays whole (old or new) at a cut.
#[test]
fn agent_undo_leaves_every_project_file_whole_at_a_power_cut() {
    Campaign::run(Scenario::Undo, CI_CUTS / 5);
}

/// A device whose document is on the lazy disk ingests another device's writes from a
/// `nats-server` until the cut; afterwards it opens, verifies, and catches up on every write
/// the other device acknowledged.
#[test]
fn a_device_ingesting_from_the_broker_at_a_power_cut_opens_and_catches_up() {
    Campaign::run(Scenario::Ingest, CI_CUTS / 5);
}
