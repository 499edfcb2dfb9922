//! Does nothing and returns nothing: measures the host's own per-call cost.

wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });


struct Noop;

impl Guest for Noop {
    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn on_match(_key: Vec<u8>, _a: Event, _b: Event) -> Result<Vec<OutputRecord>, String> {
        Ok(Vec::new())
    }

    fn on_expire(_key: Vec<u8>, _event: Event, _side: Side) -> Result<Vec<OutputRecord>, String> {
        Ok(Vec::new())
    }
}

export!(Noop);
