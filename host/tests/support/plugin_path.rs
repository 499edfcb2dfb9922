//! Where the built plugins are; shared by the host's tests and the end-to-end suites (tests/lib.rs
//! includes this file with `#[path]`).

use std::path::PathBuf;

/// A built plugin; refuses to run (rather than skip) when the plugins were not built.
pub fn plugin_path(file: &str) -> PathBuf {
    let dir = std::env::var_os("COJOIN_TEST_PLUGINS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../build/plugins"));
    let path = dir.join(file);
    assert!(
        path.exists(),
        "{path:?} is missing: run `make plugins` (or `make test`) first"
    );
    path
}
