//! Durations and byte sizes as the file writes them, each with the serde `deserialize` that
//! fields name in `#[serde(with = "...")]`.

/// Byte sizes as a number of bytes or as text: `"64MiB"`, `"1GiB"`, `"512KiB"`, `"1000000"`
/// (`KB`, `MB`, `GB` are taken as the binary units too: a budget, not a disk label).
pub(super) mod byte_size {
    use serde::{Deserialize, Deserializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Given {
        Number(u64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        match Given::deserialize(d)? {
            Given::Number(n) => Ok(n),
            Given::Text(text) => parse(&text).map_err(serde::de::Error::custom),
        }
    }

    pub fn parse(text: &str) -> Result<u64, String> {
        let bad = || {
            format!("{text:?} is not a size: write e.g. \"64MiB\", \"1GiB\" or a number of bytes")
        };
        let t = text.trim();
        let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let n: u64 = t[..digits].parse().map_err(|_| bad())?;
        let shift = match t[digits..].trim().to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            _ => return Err(bad()),
        };
        n.checked_mul(1 << shift).ok_or_else(bad)
    }

    #[cfg(test)]
    #[test]
    fn sizes_parse_and_nonsense_is_refused() {
        assert_eq!(parse("64MiB"), Ok(64 << 20));
        assert_eq!(parse("1 GiB"), Ok(1 << 30));
        assert_eq!(parse("512kb"), Ok(512 << 10));
        assert_eq!(parse("1000"), Ok(1000));
        for nonsense in ["", "MiB", "1.5GiB", "-1", "64 parsecs", "99999999999999GiB"] {
            assert!(parse(nonsense).is_err(), "{nonsense:?} was accepted");
        }
    }
}

/// Durations as text: `"250ms"`, `"30s"`, `"5m"`, `"2h"`, or combinations such as `"1m30s"`.
pub(super) mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).map_err(serde::de::Error::custom)
    }

    pub fn parse(text: &str) -> Result<Duration, String> {
        let bad = || {
            format!("{text:?} is not a duration: write e.g. \"250ms\", \"30s\", \"5m\", \"1h30m\"")
        };
        let mut rest = text.trim();
        if rest.is_empty() {
            return Err(bad());
        }
        let mut total = Duration::ZERO;
        while !rest.is_empty() {
            let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
            let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
            rest = &rest[digits..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(rest.len());
            let ms = match &rest[..unit_len] {
                "ms" => 1,
                "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                _ => return Err(bad()),
            };
            // Checked: a sum of many huge parts overflowed and panicked `check`.
            total = n
                .checked_mul(ms)
                .and_then(|ms| total.checked_add(Duration::from_millis(ms)))
                .filter(|t| *t <= MAX)
                .ok_or_else(|| {
                    format!("{text:?} is longer than 100 years, the longest duration taken: write a shorter one")
                })?;
            rest = &rest[unit_len..];
        }
        Ok(total)
    }

    /// The longest duration any setting takes: event times are milliseconds in an `i64`, and a
    /// window or grace longer than this means "for ever" in practice.
    const MAX: Duration = Duration::from_secs(100 * 365 * 86_400);

    #[cfg(test)]
    #[test]
    fn durations_parse_and_nonsense_is_refused() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse("5 minutes").is_err());
        assert!(parse("10").is_err());
        assert!(parse("").is_err());
        // 1100 parts of u64::MAX milliseconds: an overflow panicked check (exit 101).
        let huge = "18446744073709551615ms".repeat(1100);
        assert!(parse(&huge).unwrap_err().contains("longer than 100 years"));
        assert!(parse("36501d")
            .unwrap_err()
            .contains("longer than 100 years"));
        assert_eq!(parse("36500d"), Ok(Duration::from_secs(36_500 * 86_400)));
    }
}

/// An optional duration: absent is `None`, present is parsed as [`duration`].
pub(super) mod optional_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = String::deserialize(d)?;
        super::duration::parse(&text)
            .map(Some)
            .map_err(serde::de::Error::custom)
    }
}
