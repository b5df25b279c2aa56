//! A valid component for an unrelated world: it exports
//! `operon:other/thing@0.1.0` (`run: func() -> string`) and nothing of the
//! Operon contract. The host must refuse it at load time and say what it
//! expected.

wit_bindgen::generate!({ path: "wit", world: "other" });

use exports::operon::other::thing::Guest;

struct Component;
export!(Component);

impl Guest for Component {
    fn run() -> String {
        "misbehave-wrong-world: I am not a reconciler".into()
    }
}
