//! `node.add` through the test kit, like any embedder's capability: given/when/then and the
//! property run through the pure pipeline and the real engine.

use elfiee::testkit::{Check, Kit, Op, OpCmd};
use elfiee::Command;
use elfiee_capabilities::Registry;
use elfiee_sync::identity::NodeKey;
use elfiee_sync::membership::{key_of, members, register};
use proptest::prelude::*;
use serde_json::json;

fn registry() -> Registry {
    let mut r = Registry::builtin();
    register(&mut r);
    r
}

fn add(editor: &str, key: &NodeKey) -> Command {
    let hex = key.node().to_hex();
    Command::new(
        editor,
        "node.add",
        None,
        json!({"node_id": hex, "public_key": hex, "name": "laptop"}),
    )
}

#[test]
fn the_owner_adds_devices_and_only_the_owner() {
    let mut kit = Kit::new(registry());
    kit.given_owner("Alice");
    kit.given(Command::new(
        "alice",
        "editor.create",
        None,
        json!({"name": "Bob", "editor_id": "bob"}),
    ));
    let laptop = NodeKey::from_seed([1; 32]);
    kit.when(add("alice", &laptop))
        .kinds(&["node.add"])
        .state(|s| members(s).len() == 1);
    assert_eq!(key_of(kit.state())(&laptop.node()), Some(laptop.node().0));
    assert_eq!(
        key_of(kit.state())(&NodeKey::from_seed([2; 32]).node()),
        None
    );
    // Again: already a member, nothing committed.
    assert!(kit.when(add("alice", &laptop)).events().is_empty());
    // Bob may not, even with the right to grant.
    kit.given(Command::new(
        "alice",
        "core.grant",
        None,
        json!({"editor_id": "bob", "cap_id": "core.grant"}),
    ));
    kit.when(add("bob", &NodeKey::from_seed([3; 32])))
        .rejected("rejected", "only the file owner adds devices");
    // Bad keys.
    kit.when(Command::new(
        "alice",
        "node.add",
        None,
        json!({"node_id": "ab", "public_key": "ab"}),
    ))
    .rejected("invalid_payload", "64 lower-case hex");
    // 64 hex characters that are no point on the curve.
    let off_curve = (0u8..=255)
        .map(|b| [b; 32])
        .find(|k| ed25519_dalek::VerifyingKey::from_bytes(k).is_err())
        .map(|k| elfiee_sync::identity::NodeId(k).to_hex())
        .expect("some 32 equal bytes are no curve point");
    kit.when(Command::new(
        "alice",
        "node.add",
        None,
        json!({"node_id": off_curve, "public_key": off_curve}),
    ))
    .rejected("invalid_payload", "not a point on the curve");
    let other = NodeKey::from_seed([4; 32]).node().to_hex();
    kit.when(Command::new(
        "alice",
        "node.add",
        None,
        json!({"node_id": other, "public_key": laptop.node().to_hex()}),
    ))
    .rejected("invalid_payload", "node_id must equal public_key");
}

fn node_steps() -> BoxedStrategy<Op> {
    (0u8..6, any::<bool>())
        .prop_map(|(seed, owner)| {
            let hex = NodeKey::from_seed([seed; 32]).node().to_hex();
            OpCmd::new("node.add", json!({"node_id": hex, "public_key": hex}))
                .by(if owner { "$owner" } else { "$editor:1" })
                .into()
        })
        .boxed()
}

#[test]
fn node_add_passes_the_kits_property_run() {
    let report = Check::new(registry())
        .block_types(&[], &["node.add"])
        .ops(4, node_steps())
        .cases(16)
        .steps(1..40)
        .assert();
    assert!(report.accepted > 0 && report.rejected > 0, "{report:?}");
}
