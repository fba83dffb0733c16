//! Content digests (`sha256:<hex>`): parsing, validation and incremental hashing.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};

/// A validated `sha256:<64 lowercase hex>` digest. Other algorithms are refused by name.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    /// Parses and validates `s`.
    pub fn parse(s: &str) -> Result<Self> {
        let Some((algo, hex)) = s.split_once(':') else {
            return Err(Error::invalid(format!(
                "digest {s:?}: missing algorithm prefix"
            )));
        };
        if algo != "sha256" {
            return Err(Error::invalid(format!(
                "digest {s:?}: unsupported algorithm {algo:?}"
            )));
        }
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(Error::invalid(format!(
                "digest {s:?}: not 64 lowercase hex characters"
            )));
        }
        Ok(Digest(s.to_string()))
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Digest(format!("sha256:{}", hex::encode(Sha256::digest(bytes))))
    }

    /// Builds a digest from a raw 32-byte sha256 output.
    pub fn from_sha256(raw: &[u8]) -> Self {
        Digest(format!("sha256:{}", hex::encode(raw)))
    }

    /// `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The hex part, used for file names.
    pub fn hex(&self) -> &str {
        &self.0[7..]
    }

    /// The first 12 hex characters, for logs and messages.
    pub fn short(&self) -> &str {
        &self.0[7..19]
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.0)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Digest::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Incremental sha256 for streaming verification.
#[derive(Default, Clone)]
pub struct Hasher(Sha256);

impl Hasher {
    /// A fresh hasher.
    pub fn new() -> Self {
        Self::default()
    }
    /// Feeds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    /// The digest of everything fed so far.
    pub fn finish(self) -> Digest {
        Digest::from_sha256(&self.0.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_sha256_and_rejects_others() {
        let d = Digest::of(b"");
        assert_eq!(
            d.as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(Digest::parse(d.as_str()).ok(), Some(d.clone()));
        assert!(Digest::parse("sha512:abcd").is_err());
        assert!(Digest::parse("sha256:ABC").is_err());
        assert!(Digest::parse(&d.as_str().to_uppercase()).is_err());
        assert!(Digest::parse("e3b0c44298fc").is_err());
    }

    #[test]
    fn hasher_matches_one_shot() {
        let mut h = Hasher::new();
        h.update(b"hello ");
        h.update(b"world");
        assert_eq!(h.finish(), Digest::of(b"hello world"));
    }
}
