//! The checklist's golden document (tests/golden at the repository's root, made by
//! `scripts/make-golden`) opens, replays and verifies with this build of the example.

#[test]
fn the_golden_checklist_document_opens_replays_and_verifies_to_its_recorded_digest() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_elfiee-checklist"));
    let mut checked = Vec::new();
    for set in std::fs::read_dir(root).unwrap() {
        checked.extend(elfiee::testkit::golden::check_golden(
            &set.unwrap().path(),
            bin,
            "elfiee-checklist",
        ));
    }
    assert!(checked.contains(&"checklist".to_string()), "{checked:?}");
}
