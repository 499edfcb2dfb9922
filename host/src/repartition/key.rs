//! A record's join key, from its key or from a field of its value (`join.left_key`,
//! `join.right_key`). Pure.

use crate::config::KeySelector;

/// Why a record has no join key; dead letters carry [`NoKey::reason`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoKey {
    /// The record's own key is absent.
    NullKey,
    /// The value is absent (a tombstone), so the field cannot be read.
    NoValue,
    /// The value is not JSON.
    NotJson(String),
    /// The pointer names nothing in the value, or names `null`.
    Missing(String),
    /// The pointer names an object or an array, which is not a key.
    NotScalar(String),
}

impl NoKey {
    /// A short reason for headers and logs.
    pub fn reason(&self) -> String {
        match self {
            NoKey::NullKey => "the record has no key".to_owned(),
            NoKey::NoValue => "the record has no value to take the join key from".to_owned(),
            NoKey::NotJson(e) => {
                format!("the value is not JSON ({e}), so it has no join key field")
            }
            NoKey::Missing(p) => format!("the value has no {p} (or it is null)"),
            NoKey::NotScalar(p) => {
                format!("{p} in the value is an object or an array, not a key")
            }
        }
    }
}

/// The join key of a record with `key` and `value`. A field's string is its key as UTF-8 bytes
/// (so `{"order_id": "o-1"}` joins a record keyed `o-1`); a number or boolean is its JSON text.
pub fn select(
    selector: &KeySelector,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Result<Vec<u8>, NoKey> {
    match selector {
        KeySelector::RecordKey => key.map(<[u8]>::to_vec).ok_or(NoKey::NullKey),
        KeySelector::Pointer(pointer) => {
            let value = value.ok_or(NoKey::NoValue)?;
            let json: serde_json::Value =
                serde_json::from_slice(value).map_err(|e| NoKey::NotJson(e.to_string()))?;
            match json.pointer(pointer) {
                None | Some(serde_json::Value::Null) => Err(NoKey::Missing(pointer.clone())),
                Some(serde_json::Value::String(s)) => Ok(s.as_bytes().to_vec()),
                Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                    Ok(v.to_string().into_bytes())
                }
                Some(_) => Err(NoKey::NotScalar(pointer.clone())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pointer(p: &str) -> KeySelector {
        KeySelector::Pointer(p.to_owned())
    }

    #[test]
    fn a_field_of_the_value_is_the_key_as_text() {
        let v = br#"{"order_id":"o-1","n":42,"ok":true,"nested":{"id":"x"}}"#;
        assert_eq!(
            select(&pointer("/order_id"), None, Some(v)).unwrap(),
            b"o-1"
        );
        assert_eq!(select(&pointer("/n"), Some(b"k"), Some(v)).unwrap(), b"42");
        assert_eq!(select(&pointer("/ok"), None, Some(v)).unwrap(), b"true");
        assert_eq!(select(&pointer("/nested/id"), None, Some(v)).unwrap(), b"x");
        assert_eq!(
            select(&KeySelector::RecordKey, Some(b"k"), Some(v)).unwrap(),
            b"k"
        );
    }

    #[test]
    fn a_record_without_the_key_says_why() {
        let v = br#"{"order_id":null,"nested":{"id":"x"}}"#;
        assert_eq!(
            select(&KeySelector::RecordKey, None, Some(v)),
            Err(NoKey::NullKey)
        );
        assert_eq!(
            select(&pointer("/order_id"), None, None),
            Err(NoKey::NoValue)
        );
        assert_eq!(
            select(&pointer("/order_id"), None, Some(v)),
            Err(NoKey::Missing("/order_id".into()))
        );
        assert_eq!(
            select(&pointer("/absent"), None, Some(v)),
            Err(NoKey::Missing("/absent".into()))
        );
        assert_eq!(
            select(&pointer("/nested"), None, Some(v)),
            Err(NoKey::NotScalar("/nested".into()))
        );
        let err = select(&pointer("/order_id"), None, Some(b"not json")).unwrap_err();
        assert!(matches!(err, NoKey::NotJson(_)));
        assert!(err.reason().contains("not JSON"), "{}", err.reason());
    }
}
