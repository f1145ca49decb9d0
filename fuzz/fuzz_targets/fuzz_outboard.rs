//! Outboards (`DSVOUTB1`): the BLAKE3 chaining values of a file's 64 KiB blocks, as read
//! from packs and remotes, and the hashing that writes them.
#![no_main]
use dsv::id::ObjectId;
use dsv::outboard::{BlockHasher, Outboard, has_outboard};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // As read: the first 32 bytes name the file, the rest is the stored outboard.
    if data.len() >= 32 {
        let id = ObjectId(data[..32].try_into().unwrap());
        if let Ok(outboard) = Outboard::decode(&data[32..], &id) {
            // Canonical, and only ever proven against its own file id.
            assert_eq!(outboard.encode(), &data[32..]);
            assert!(has_outboard(outboard.size()));
            let _ = outboard.check_block(0, &data[32..]);
        }
    }
    // As written: the input as a file. Its id is its BLAKE3 hash, and its outboard (when it
    // has more than one block) decodes, proven, and passes every block of it.
    let mut hasher = BlockHasher::new();
    for piece in data.chunks(7919) {
        hasher.update(piece);
    }
    let (id, outboard) = hasher.finalize();
    assert_eq!(id, ObjectId::from(blake3::hash(data)));
    assert_eq!(outboard.is_some(), has_outboard(data.len() as u64));
    if let Some(outboard) = outboard {
        let decoded = Outboard::decode(&outboard.encode(), &id).expect("its own outboard decodes");
        for index in 0..decoded.blocks() {
            let range = decoded.block_range(index);
            decoded
                .check_block(index, &data[range.start as usize..range.end as usize])
                .expect("every block passes");
        }
    }
});
