//! The partitioners producers use, to detect joined topics whose producers disagree. A key-based
//! join only works when the same key lands in the same partition number of both topics. Java
//! clients (and Kafka Streams) default to murmur2; librdkafka clients (confluent-kafka-python, Go,
//! .NET, rdkafka) default to `consistent_random`, a CRC32 of the key — so the same key goes to
//! different partitions unless librdkafka producers set `partitioner=murmur2_random`.

use std::collections::HashMap;

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`).
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = 0x9747_b28c ^ len as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        if tail.len() >= 3 {
            h ^= u32::from(tail[2]) << 16;
        }
        if tail.len() >= 2 {
            h ^= u32::from(tail[1]) << 8;
        }
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// CRC-32 (IEEE 802.3, as zlib), which librdkafka's `consistent` partitioners use.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Partitioners a producer may have used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Partitioner {
    /// Java's default, librdkafka's `murmur2` / `murmur2_random`.
    Murmur2,
    /// librdkafka's default `consistent_random` (and `consistent`).
    Crc32,
}

impl Partitioner {
    pub fn partition(self, key: &[u8], partitions: usize) -> i32 {
        let n = partitions.max(1) as u32;
        match self {
            Partitioner::Murmur2 => ((murmur2(key) as u32 & 0x7fff_ffff) % n) as i32,
            Partitioner::Crc32 => (crc32(key) % n) as i32,
        }
    }
}

/// Sampled keys of one topic: which known partitioners agree with every sample.
pub fn consistent_partitioners(samples: &[(Vec<u8>, i32)], partitions: usize) -> Vec<Partitioner> {
    [Partitioner::Murmur2, Partitioner::Crc32]
        .into_iter()
        .filter(|p| {
            samples
                .iter()
                .all(|(k, part)| p.partition(k, partitions) == *part)
        })
        .collect()
}

/// Keys sampled from both topics that sit in different partition numbers: (key, left, right).
pub fn mismatched_keys(
    left: &HashMap<Vec<u8>, i32>,
    right: &HashMap<Vec<u8>, i32>,
) -> Vec<(Vec<u8>, i32, i32)> {
    let mut out: Vec<_> = left
        .iter()
        .filter_map(|(k, &lp)| {
            right
                .get(k)
                .filter(|&&rp| rp != lp)
                .map(|&rp| (k.clone(), lp, rp))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_test_vectors() {
        // From Apache Kafka's UtilsTest.testMurmur2.
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
            -58897971
        );
        assert_eq!(murmur2(b"abc"), 479470107);
    }

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn samples_tell_which_partitioner_produced_them() {
        let keys: Vec<Vec<u8>> = (0..50).map(|i| format!("order-{i}").into_bytes()).collect();
        let java: Vec<_> = keys
            .iter()
            .map(|k| (k.clone(), Partitioner::Murmur2.partition(k, 6)))
            .collect();
        let rdkafka: Vec<_> = keys
            .iter()
            .map(|k| (k.clone(), Partitioner::Crc32.partition(k, 6)))
            .collect();
        assert_eq!(consistent_partitioners(&java, 6), [Partitioner::Murmur2]);
        assert_eq!(consistent_partitioners(&rdkafka, 6), [Partitioner::Crc32]);

        let left: HashMap<_, _> = java.into_iter().collect();
        let right: HashMap<_, _> = rdkafka.into_iter().collect();
        let mismatched = mismatched_keys(&left, &right);
        assert!(
            !mismatched.is_empty() && mismatched.len() < 50,
            "{}",
            mismatched.len()
        );
        assert!(mismatched_keys(&left, &left).is_empty());
    }
}
