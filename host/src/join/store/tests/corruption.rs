//! Spill files damaged on disk: every read checks the checksums of the blocks it touches, and a
//! mismatch or a file cut short is a panic naming the file, never a wrong event.

use super::*;
use crate::join::store::spill::Disk;

/// Overwrites one byte of `path` at `at` with another value.
fn flip_byte(path: &std::path::Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x5a], at).unwrap();
}

#[test]
fn a_spilled_event_changed_on_disk_is_an_error_naming_the_file_never_a_wrong_event() {
    let base = tempfile::tempdir().unwrap();
    let (mut store, _dir) = spilling_store(base.path());
    let events: Vec<Event> = (0..40)
        .map(|i| event(i, b"key", Some(vec![i as u8; 3_000]), Vec::new()))
        .collect();
    let handles: Vec<Handle> = events
        .iter()
        .map(|e| store.push(e, links(Side::LEFT)))
        .collect();
    let path = store.spill_paths()[0].clone();
    // The first event opens the first segment, at the start of the file.
    assert_eq!(handles[0] & u64::from(u32::MAX), 0);
    // Its links change in place on disk, checksums with them.
    store.set_next(handles[0], handles[1]);
    assert_eq!(store.event(handles[0]), events[0]);
    // A byte of its value, and one of its key, as another process would write them.
    flip_byte(&path, (HEADER + 3 + 100) as u64);
    for read in [
        Box::new(|s: &mut EventStore| drop(s.event(handles[0]))) as Box<dyn Fn(&mut EventStore)>,
        Box::new(|s: &mut EventStore| {
            let _ = s.key_is(handles[0], b"key");
        }),
        Box::new(|s: &mut EventStore| s.set_next(handles[0], handles[2])),
        Box::new(|s: &mut EventStore| s.read_back(handles[0])),
    ] {
        let msg = panic_message(|| read(&mut store));
        assert!(
            msg.contains(&path.display().to_string()) && msg.contains("not what this host wrote"),
            "{msg}"
        );
        assert!(msg.contains("bytes 0..4096"), "{msg}");
    }
    // Events in other blocks read as before: the third segment starts past the first block (the
    // first two, of 4 and 8 KiB, hold three events of 3,045 bytes).
    let far = handles
        .iter()
        .position(|h| h >> 32 >= (handles[0] >> 32) + 2)
        .unwrap();
    assert_eq!(far, 3);
    assert_eq!(store.event(handles[far]), events[far]);
}

#[test]
fn every_read_of_a_spill_file_checks_the_blocks_it_touches() {
    let base = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(base.path()).unwrap();
    let mut spill = Spill::new(dir);
    let bytes = |len: usize, seed: u8| -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    };
    // Segments across block boundaries: file bytes 0..5000, 5000..305000, 305000..305010.
    let segments = [bytes(5_000, 1), bytes(300_000, 2), bytes(10, 3)];
    let disks: Vec<Disk> = segments.iter().map(|s| spill.write(s).unwrap()).collect();
    for (d, s) in disks.iter().zip(&segments) {
        let mut buf = vec![0; s.len()];
        spill.read(d, 0, &mut buf);
        assert_eq!(&buf, s);
    }
    // An overwrite across a block boundary (file byte 8190..8200) keeps its blocks' checksums.
    spill.write_at(&disks[1], 3_190, &[9; 10]);
    let mut want = segments[1].clone();
    want[3_190..3_200].fill(9);
    assert_eq!(spill.read_back(&disks[1]), want);

    // Damage file byte 200_000: the block 196_608..200_704, in the middle of the second segment.
    let path = spill.paths()[0].clone();
    flip_byte(&path, 200_000);
    let mut small = [0; 8];
    spill.read(&disks[1], 100_000, &mut small);
    spill.read(&disks[2], 0, &mut small);
    let damaged = |msg: String| {
        assert!(
            msg.contains(&path.display().to_string()) && msg.contains("bytes 196608..200704"),
            "{msg}"
        );
    };
    damaged(panic_message(|| {
        spill.read(&disks[1], 195_000, &mut small);
    }));
    damaged(panic_message(|| spill.write_at(&disks[1], 195_000, &[1])));
    damaged(panic_message(|| drop(spill.read_back(&disks[1]))));

    // A file cut short is an error naming it too.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(304_000)
        .unwrap();
    let msg = panic_message(|| spill.read(&disks[2], 0, &mut small));
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}
