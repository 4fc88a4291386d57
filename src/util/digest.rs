//! Lowercase hex SHA-256, the digest behind every fingerprint and hashed name.

use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `text` (`developerInstructionsSha256`, hashed file names).
pub fn sha256_hex(text: &str) -> String {
    sha256_hex_bytes(text.as_bytes())
}

/// Lowercase hex SHA-256 of raw bytes.
pub fn sha256_hex_bytes(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::sha256_hex;

    #[test]
    fn hashes_as_sha256sum_does() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
