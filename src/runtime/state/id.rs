//! Object ids: 64 random hex digits, looked up by unique prefix.

use crate::error::{echo, Error, Result};

/// The length of a full id in hex digits.
pub const ID_LEN: usize = 64;

/// A fresh random id: 32 random bytes as 64 lowercase hex digits.
pub fn new_id() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// Whether `s` has the shape of a full id (64 lowercase hex digits).
pub fn is_valid(s: &str) -> bool {
    s.len() == ID_LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The one id among `ids` that starts with `prefix` (an exact match always wins).
///
/// `kind` names the object in errors ("container", "sandbox"). An empty prefix or one matching
/// several ids is InvalidArgument; no match is NotFound naming the prefix.
pub fn resolve<'a, I>(kind: &str, prefix: &str, ids: I) -> Result<String>
where
    I: IntoIterator<Item = &'a str>,
{
    if prefix.is_empty() {
        return Err(Error::invalid(format!("{kind} id: empty")));
    }
    let mut found: Option<&str> = None;
    let mut count = 0usize;
    for id in ids {
        if id == prefix {
            return Ok(id.to_string());
        }
        if id.starts_with(prefix) {
            count += 1;
            found = Some(id);
        }
    }
    match (count, found) {
        (1, Some(id)) => Ok(id.to_string()),
        (0, _) | (_, None) => Err(Error::not_found(format!(
            "{kind} {}: not found",
            echo(prefix)
        ))),
        (n, _) => Err(Error::invalid(format!(
            "{kind} {}: ambiguous prefix matches {n} ids",
            echo(prefix)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn new_ids_are_valid_and_distinct() {
        let a = new_id();
        let b = new_id();
        assert!(is_valid(&a), "{a}");
        assert_ne!(a, b);
        assert!(!is_valid("abc"));
        assert!(!is_valid(&a.to_uppercase()));
    }

    #[test]
    fn resolve_unique_ambiguous_missing() {
        let ids = ["abc1".repeat(16), "abd2".repeat(16), "f00d".repeat(16)];
        let it = || ids.iter().map(String::as_str);
        assert_eq!(resolve("container", "f", it()).expect("unique"), ids[2]);
        assert_eq!(resolve("container", "abc", it()).expect("unique"), ids[0]);
        assert_eq!(resolve("container", &ids[1], it()).expect("exact"), ids[1]);

        let e = resolve("container", "ab", it()).expect_err("ambiguous");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("ab"), "{e}");

        let e = resolve("sandbox", "99", it()).expect_err("missing");
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert_eq!(e.message(), "sandbox 99: not found");

        let e = resolve("container", "", it()).expect_err("empty");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
}
