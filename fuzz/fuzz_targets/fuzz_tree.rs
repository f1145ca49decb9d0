//! Tree objects (`DSVTREE1`), as read from packs and remotes.
#![no_main]
use dsv::object::Tree;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(tree) = Tree::decode(data) {
        // Canonical: every byte is a field, names are strictly sorted and trailing bytes are
        // refused, so re-encoding gives back the input byte for byte.
        let bytes = tree.encode();
        assert_eq!(bytes, data, "a decoded tree re-encodes differently");
        assert_eq!(Tree::decode(&bytes).expect("re-encoded tree decodes"), tree);
    }
});
