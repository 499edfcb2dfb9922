//! `PUT /plugins`: an upload's name, its swap, and where it is kept so that the watch and a
//! restart load it. Runs on the upload pool (a swap compiles for seconds); the body has
//! arrived before ([`super::body`]).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::json;

use super::{json_reply, plugins_json, AdminState, Reply};
use crate::hotswap::{resolve, swap_recorded};

/// The name of an upload: `PUT /plugins/<file>.wasm` (what `curl -T file.wasm URL/plugins/`
/// sends) or `PUT /plugins?name=<name>`; "upload" for a bare `PUT /plugins`. Refused (400)
/// when it is not a plain file name.
pub(super) fn name(target: &str) -> Result<String, Reply> {
    match upload_name(target) {
        Some(name) => Ok(name),
        None if target == "/plugins" => Ok("upload".to_owned()),
        None => Err(json_reply(
            400,
            json!({ "error": "a plugin name may hold letters, digits, '-', '_' and '.' only: PUT /plugins/<name>.wasm or /plugins?name=<name>" }),
        )),
    }
}

fn upload_name(target: &str) -> Option<String> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let named = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("name="))
        .or_else(|| path.strip_prefix("/plugins/"))
        .filter(|n| !n.is_empty())?;
    let name = named.strip_suffix(".wasm").unwrap_or(named);
    // A file name, never a path: it may be written into the plugin directory.
    let ok = !name.is_empty()
        && name.len() <= 100
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    ok.then(|| name.to_owned())
}

/// Swaps the component (`body`, or why it was not received) in as `name`, and keeps it where a
/// restart finds it.
pub(super) fn upload(
    name: &str,
    body: Result<Vec<u8>, (u16, String)>,
    state: &AdminState,
) -> Reply {
    let bytes = match body {
        Ok(b) => b,
        Err((status, e)) => return json_reply(status, json!({ "error": e })),
    };
    if bytes.is_empty() {
        return json_reply(
            400,
            json!({ "error": "empty body: send the .wasm component, e.g. curl -T plugin.wasm" }),
        );
    }
    let source = format!("PUT /plugins ({name})");
    match swap_recorded(&state.registry, &state.metrics, &bytes, name, &source) {
        Ok(version) => {
            let mut reply = plugins_json(state);
            match &state.upload_dir {
                Some(dir) => match persist(dir, name, &version.sha256, &bytes) {
                    Ok(Kept::Written(file)) => {
                        reply["persisted"] = json!(file.display().to_string())
                    }
                    Ok(Kept::Found(file)) => {
                        reply["persisted"] = json!(file.display().to_string());
                        let kept = file.file_name().unwrap_or_default().to_string_lossy();
                        reply["note"] = json!(format!(
                            "the plugin directory already held these bytes as {kept}: kept that file, wrote no copy"
                        ));
                    }
                    Err(e) => reply["persisted"] = json!(format!("not persisted: {e}")),
                },
                None => {
                    reply["persisted"] = json!(false);
                    reply["note"] = json!("plugin.path is a file: this upload serves until that file changes or the host restarts; point plugin.path at a directory to keep uploads");
                }
            }
            json_reply(200, reply)
        }
        Err(e) => json_reply(
            422,
            json!({
                "error": e.to_string(),
                "upload": name,
                "running": state.registry.current().label.to_string(),
            }),
        ),
    }
}

/// Where an accepted upload is kept in the plugin directory.
#[derive(Debug, PartialEq)]
enum Kept {
    /// Written as `<name>.wasm`.
    Written(PathBuf),
    /// A file there already held these bytes (the version running, deployed again, or an
    /// older one rolled back to): a second copy would only fill the directory.
    Found(PathBuf),
}

/// Keeps an accepted upload in `dir` as its newest `.wasm` file: the watch sees it as the
/// version already running, a restart loads it. A new file is written aside, then renamed in.
fn persist(dir: &Path, name: &str, sha256: &str, bytes: &[u8]) -> std::io::Result<Kept> {
    if let Some(file) = identical_file(dir, bytes)? {
        // A restart loads the newest file: an older one holding these bytes must become it.
        if resolve(dir).ok().as_deref() != Some(file.as_path()) {
            std::fs::File::options()
                .write(true)
                .open(&file)?
                .set_modified(SystemTime::now())?;
        }
        tracing::info!(file = %file.display(), "uploaded plugin already in the plugin directory");
        return Ok(Kept::Found(file));
    }
    let file = dir.join(format!("{name}.wasm"));
    let partial = dir.join(format!(".{name}.{}.partial", &sha256[..12]));
    std::fs::write(&partial, bytes)?;
    std::fs::rename(&partial, &file)?;
    tracing::info!(file = %file.display(), "uploaded plugin kept in the plugin directory");
    Ok(Kept::Written(file))
}

/// The newest `.wasm` file of `dir` whose bytes are `bytes`, if any.
fn identical_file(dir: &Path, bytes: &[u8]) -> std::io::Result<Option<PathBuf>> {
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let meta = entry.metadata()?;
        let candidate = path.extension().is_some_and(|e| e == "wasm")
            && meta.is_file()
            && meta.len() == bytes.len() as u64;
        if candidate && same_bytes(&path, bytes)? {
            let modified = meta.modified()?;
            if newest.as_ref().is_none_or(|(t, _)| modified > *t) {
                newest = Some((modified, path));
            }
        }
    }
    Ok(newest.map(|(_, path)| path))
}

/// Whether `file` holds exactly `bytes`, read a chunk at a time: an upload may be hundreds of
/// MiB, already held once in memory.
fn same_bytes(file: &Path, mut bytes: &[u8]) -> std::io::Result<bool> {
    let mut file = std::fs::File::open(file)?;
    let mut chunk = vec![0; 64 * 1024];
    loop {
        let n = file.read(&mut chunk)?;
        if n == 0 {
            return Ok(bytes.is_empty());
        }
        if n > bytes.len() || chunk[..n] != bytes[..n] {
            return Ok(false);
        }
        bytes = &bytes[n..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_upload_is_named_by_its_file_or_query_and_never_by_a_path() {
        assert_eq!(
            upload_name("/plugins/order_paid_v2.wasm").as_deref(),
            Some("order_paid_v2")
        );
        assert_eq!(
            upload_name("/plugins?name=audit-1").as_deref(),
            Some("audit-1")
        );
        assert_eq!(upload_name("/plugins"), None);
        assert_eq!(upload_name("/plugins/..%2Fetc"), None);
        assert_eq!(upload_name("/plugins/.hidden.wasm"), None);
        assert_eq!(upload_name("/plugins?name=a/b"), None);
        assert_eq!(name("/plugins").unwrap(), "upload");
        assert_eq!(name("/plugins?name=a/b").unwrap_err().status, 400);
    }

    fn wasm_files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    // Names of the partial files only.
    const SHA1: &str = "111111111111";
    const SHA2: &str = "222222222222";

    /// Issue 29: deploying the bytes already running wrote a second copy under the new name.
    #[test]
    fn bytes_already_in_the_plugin_directory_are_not_written_again() {
        let dir = tempfile::tempdir().unwrap();
        let (v1, v2) = (b"version one".as_slice(), b"version two".as_slice());
        assert_eq!(
            persist(dir.path(), "orders", SHA1, v1).unwrap(),
            Kept::Written(dir.path().join("orders.wasm"))
        );
        // The same bytes again, under another name: the file that holds them is kept.
        assert_eq!(
            persist(dir.path(), "orders-again", SHA1, v1).unwrap(),
            Kept::Found(dir.path().join("orders.wasm"))
        );
        assert_eq!(wasm_files(dir.path()), ["orders.wasm"]);
        // Same length, other bytes: a new version, written.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            persist(dir.path(), "orders-v2", SHA2, v2).unwrap(),
            Kept::Written(dir.path().join("orders-v2.wasm"))
        );
        assert_eq!(
            resolve(dir.path()).unwrap(),
            dir.path().join("orders-v2.wasm")
        );
        // A rollback to v1 reuses its file and makes it the newest, so a restart loads it.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            persist(dir.path(), "rollback", SHA1, v1).unwrap(),
            Kept::Found(dir.path().join("orders.wasm"))
        );
        assert_eq!(resolve(dir.path()).unwrap(), dir.path().join("orders.wasm"));
        assert_eq!(wasm_files(dir.path()), ["orders-v2.wasm", "orders.wasm"]);
        assert_eq!(std::fs::read(dir.path().join("orders.wasm")).unwrap(), v1);
    }

    #[test]
    fn a_file_is_the_same_only_when_every_byte_is() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.wasm");
        let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        std::fs::write(&file, &big).unwrap();
        assert!(same_bytes(&file, &big).unwrap());
        let mut changed = big.clone();
        changed[150_000] ^= 1;
        assert!(!same_bytes(&file, &changed).unwrap());
        assert!(!same_bytes(&file, &big[..199_999]).unwrap());
        assert!(!same_bytes(&file, &[big.clone(), vec![0]].concat()).unwrap());
    }
}
