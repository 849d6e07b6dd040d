//! The lazy filesystem mounted for real: what programs see, and what a cut leaves.

use std::fs;
use std::io::Write;

use elfiee_lazyfs::{Cut, LazyFs};

/// The mount, or `None` after saying loudly why these tests cannot run here.
fn mount(backing: &std::path::Path, mnt: &std::path::Path) -> Option<LazyFs> {
    if let Some(why) = elfiee_lazyfs::unavailable() {
        eprintln!("\n!!! SKIPPED: power-cut tests need root and /dev/fuse: {why} !!!\n");
        return None;
    }
    Some(LazyFs::mount(backing, mnt).expect("mount lazyfs"))
}

#[test]
fn a_cut_keeps_what_was_synced_and_drops_the_rest() {
    let (backing, mnt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    fs::write(backing.path().join("old"), b"before the mount").unwrap();
    let Some(lazy) = mount(backing.path(), mnt.path()) else {
        return;
    };
    let m = mnt.path();
    assert_eq!(fs::read(m.join("old")).unwrap(), b"before the mount");
    fs::create_dir(m.join("d")).unwrap();
    let mut f = fs::File::create(m.join("d/synced")).unwrap();
    f.write_all(b"durable").unwrap();
    f.sync_data().unwrap();
    fs::File::open(m.join("d")).unwrap().sync_all().unwrap();
    fs::File::open(m).unwrap().sync_all().unwrap();
    f.write_all(b" and more").unwrap();
    fs::write(m.join("d/unsynced"), b"gone").unwrap();
    fs::write(m.join("old"), b"overwritten, never synced").unwrap();
    assert_eq!(fs::read(m.join("d/synced")).unwrap(), b"durable and more");
    drop(f);
    let report = lazy.cut(Cut::DropAll);
    assert!(
        fs::read(m.join("old")).is_err(),
        "after the cut the disk answers EIO"
    );
    lazy.unmount().unwrap();
    let b = backing.path();
    assert_eq!(fs::read(b.join("d/synced")).unwrap(), b"durable");
    assert!(!b.join("d/unsynced").exists());
    assert_eq!(fs::read(b.join("old")).unwrap(), b"before the mount");
    assert!(report.writes_lost >= 2, "{report:?}");
}

#[test]
fn a_remount_sees_the_cut_and_a_clean_unmount_keeps_everything() {
    let (backing, mnt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let Some(lazy) = mount(backing.path(), mnt.path()) else {
        return;
    };
    fs::write(mnt.path().join("a"), b"kept by a clean unmount").unwrap();
    std::os::unix::fs::symlink("a", mnt.path().join("link")).unwrap();
    lazy.unmount().unwrap();
    assert_eq!(
        fs::read(backing.path().join("link")).unwrap(),
        b"kept by a clean unmount"
    );
    let lazy = LazyFs::mount(backing.path(), mnt.path()).unwrap();
    fs::rename(mnt.path().join("a"), mnt.path().join("b")).unwrap();
    assert!(mnt.path().join("b").exists());
    lazy.cut(Cut::DropAll);
    lazy.unmount().unwrap();
    assert!(backing.path().join("a").exists() && !backing.path().join("b").exists());
}

#[test]
fn a_write_to_a_file_opened_o_dsync_is_durable_when_it_returns() {
    use std::os::unix::fs::OpenOptionsExt;
    let (backing, mnt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let Some(lazy) = mount(backing.path(), mnt.path()) else {
        return;
    };
    fs::write(mnt.path().join("f"), b"").unwrap();
    lazy.sync_all();
    let mut f = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DSYNC)
        .open(mnt.path().join("f"))
        .unwrap();
    f.write_all(b"synced by the write").unwrap();
    drop(f);
    lazy.cut(Cut::DropAll);
    lazy.unmount().unwrap();
    assert_eq!(
        fs::read(backing.path().join("f")).unwrap(),
        b"synced by the write"
    );
}
