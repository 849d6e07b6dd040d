//! The test kit over the built-in capabilities: given/when/then, and the property run of
//! generated sequences through the pure pipeline and the real engine.

use elfiee::testkit::{Check, Kit};
use elfiee::Command;
use serde_json::json;

#[test]
fn given_when_then_on_the_builtins() {
    let mut kit = Kit::builtin();
    let owner = kit.given_owner("Alice");
    assert_eq!(owner, "alice");
    let id = kit.given(Command::new(
        "alice",
        "core.create",
        None,
        json!({"name": "notes", "block_type": "markdown"}),
    ))[0]
        .entity
        .clone();
    kit.when(Command::new(
        "alice",
        "markdown.write",
        Some(&id),
        json!({"markdown": "# Hi"}),
    ))
    .kinds(&["markdown.write"])
    .state(|s| s.blocks[id.as_str()].contents["markdown"] == "# Hi");
    kit.when(Command::new(
        "carol",
        "markdown.write",
        Some(&id),
        json!({"markdown": "x"}),
    ))
    .rejected("unknown_editor", "carol");
    kit.when(Command::new(
        "alice",
        "markdown.write",
        Some("nope"),
        json!({"markdown": "x"}),
    ))
    .rejected("block_not_found", "nope");
    // A body large enough for the content store: the event carries a reference.
    let big = "word ".repeat(100);
    let ev = kit
        .when(Command::new(
            "alice",
            "markdown.write",
            Some(&id),
            json!({"markdown": big}),
        ))
        .events()
        .to_vec();
    let r = elfiee::projections::content::ref_of(&ev[0].value["contents"]["markdown"]).unwrap();
    assert_eq!(kit.content(&r), Some(big.as_str()));
}

#[test]
fn builtin_capabilities_pass_a_short_property_run() {
    let started = std::time::Instant::now();
    let report = Check::new(elfiee::capabilities::Registry::builtin())
        .cases(4)
        .steps(20..60)
        .assert();
    eprintln!("{report:?} in {:?}", started.elapsed());
    assert!(report.accepted > 0 && report.rejected > 0, "{report:?}");
}

/// The bar: at least 10,000 generated commands over the built-ins, with
/// close-and-reopen steps, through the pipeline and the real engine, in under 60 s in CI
/// (the time is printed; CI's log shows it).
#[test]
fn builtin_capabilities_pass_ten_thousand_generated_commands_with_reopens() {
    let started = std::time::Instant::now();
    let report = Check::new(elfiee::capabilities::Registry::builtin())
        .cases(100)
        .steps(90..130)
        .assert();
    let took = started.elapsed();
    eprintln!("{report:?} in {took:?}");
    assert!(report.commands >= 10_000, "{report:?}");
    assert!(report.reopens >= 100, "{report:?}");
    assert!(
        report.accepted >= 5_000 && report.rejected >= 1_000,
        "{report:?}"
    );
}
