//! Init config carried inside a component, in a custom section named `cojoin-init-config` (a JSON
//! object of strings). The host passes its entries to `init` before the host config's
//! (`plugin.config`), and compiles the component without the section, so two components that
//! differ only in it share one compiled artifact.
//!
//! It is what makes a Python rebuild that changed only `app.py` fast: `cojoin plugin build`
//! reuses the component it built before and appends the new source here, and the loader it
//! built in runs that source at `init` (see `project::python`). Nothing else reads the section;
//! a component without it loads as before.

/// The custom section's name.
pub const SECTION: &str = "cojoin-init-config";

/// A component's bytes without the section, and the entries the section held.
#[derive(Debug, PartialEq, Eq)]
pub struct Embedded {
    pub code: Vec<u8>,
    pub config: Vec<(String, String)>,
}

/// The section of `bytes`, if it has one. A binary that is not Wasm, or whose sections cannot be
/// walked, is left to the compiler to report (`Ok(None)`); a section that is there but is not a
/// JSON object of strings is an error naming it.
pub fn split(bytes: &[u8]) -> Result<Option<Embedded>, String> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Ok(None);
    }
    let mut pos = 8;
    let mut found: Option<(std::ops::Range<usize>, &[u8])> = None;
    while pos < bytes.len() {
        let id = bytes[pos];
        let Some((size, after_size)) = leb_u32(bytes, pos + 1) else {
            return Ok(None);
        };
        let end = after_size + size as usize;
        if end > bytes.len() {
            return Ok(None);
        }
        if id == 0 {
            if let Some((len, name_at)) = leb_u32(bytes, after_size) {
                let name_end = name_at + len as usize;
                if name_end <= end && &bytes[name_at..name_end] == SECTION.as_bytes() {
                    if found.is_some() {
                        return Err(format!("the component has two {SECTION} sections"));
                    }
                    found = Some((pos..end, &bytes[name_end..end]));
                }
            }
        }
        pos = end;
    }
    let Some((range, data)) = found else {
        return Ok(None);
    };
    let config = parse(data)?;
    let mut code = Vec::with_capacity(bytes.len() - range.len());
    code.extend_from_slice(&bytes[..range.start]);
    code.extend_from_slice(&bytes[range.end..]);
    Ok(Some(Embedded { code, config }))
}

fn parse(data: &[u8]) -> Result<Vec<(String, String)>, String> {
    let bad = |why: String| format!("the component's {SECTION} section {why}");
    let value: serde_json::Value =
        serde_json::from_slice(data).map_err(|e| bad(format!("is not JSON: {e}")))?;
    let object = value
        .as_object()
        .ok_or_else(|| bad("is not a JSON object".into()))?;
    object
        .iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Ok((k.clone(), s.clone())),
            _ => Err(bad(format!("has a value for {k:?} that is not a string"))),
        })
        .collect()
}

/// `bytes` (a component without the section) with the section appended, holding `config`.
pub fn append(bytes: &[u8], config: &[(String, String)]) -> Vec<u8> {
    let object: serde_json::Map<String, serde_json::Value> = config
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let data = serde_json::to_vec(&object).expect("a map of strings serializes");
    let mut content = leb(SECTION.len() as u32);
    content.extend_from_slice(SECTION.as_bytes());
    content.extend_from_slice(&data);
    let mut out = Vec::with_capacity(bytes.len() + content.len() + 6);
    out.extend_from_slice(bytes);
    out.push(0);
    out.extend(leb(content.len() as u32));
    out.extend(content);
    out
}

fn leb(mut n: u32) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// An unsigned LEB128 at `pos`: the value and the position after it.
fn leb_u32(bytes: &[u8], mut pos: usize) -> Option<(u32, usize)> {
    let mut value: u64 = 0;
    for shift in (0..35).step_by(7) {
        let byte = *bytes.get(pos)?;
        pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return u32::try_from(value).ok().map(|v| (v, pos));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component header and one custom section named "other", standing in for real code.
    fn component() -> Vec<u8> {
        let mut bytes = b"\0asm\x0d\x00\x01\x00".to_vec();
        bytes.extend([0, 10, 5]);
        bytes.extend(b"otherdata");
        bytes
    }

    #[test]
    fn appended_entries_come_back_with_the_original_bytes() {
        let config = vec![
            ("cojoin.python.app".to_owned(), "print('é')\n".repeat(100)),
            ("b".to_owned(), String::new()),
        ];
        let with = append(&component(), &config);
        let mut got = split(&with).unwrap().unwrap();
        got.config.sort();
        let mut want = config;
        want.sort();
        assert_eq!(
            got,
            Embedded {
                code: component(),
                config: want
            }
        );
    }

    #[test]
    fn a_component_without_the_section_or_not_wasm_has_nothing_embedded() {
        assert_eq!(split(&component()).unwrap(), None);
        assert_eq!(split(b"not a component").unwrap(), None);
        // A section size running past the end: the compiler reports the binary, not us.
        assert_eq!(split(b"\0asm\x0d\x00\x01\x00\x00\x7f").unwrap(), None);
    }

    #[test]
    fn a_section_that_is_not_an_object_of_strings_is_an_error_naming_it() {
        let mut bytes = component();
        let data = br#"{"n": 1}"#;
        let mut content = leb(SECTION.len() as u32);
        content.extend_from_slice(SECTION.as_bytes());
        content.extend_from_slice(data);
        bytes.push(0);
        bytes.extend(leb(content.len() as u32));
        bytes.extend(content);
        let err = split(&bytes).unwrap_err();
        assert!(err.contains(SECTION) && err.contains("\"n\""), "{err}");
        let twice = append(&append(&component(), &[]), &[]);
        assert!(split(&twice).unwrap_err().contains("two"));
    }
}
