//! `WWW-Authenticate` parsing (RFC 7235): schemes and parameters, quoted values with commas.

use std::collections::BTreeMap;

/// One authentication challenge: `Bearer realm="…",service="…"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// The scheme, lowercased (`basic`, `bearer`).
    pub scheme: String,
    /// Parameters, names lowercased, values unquoted and unescaped.
    pub params: BTreeMap<String, String>,
}

impl Challenge {
    /// A parameter's value.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str)
    }
}

/// Every challenge in one header value; several may share a header, separated by commas.
pub fn parse(header: &str) -> Vec<Challenge> {
    let mut p = Parser {
        s: header.as_bytes(),
        i: 0,
    };
    let mut out: Vec<Challenge> = Vec::new();
    loop {
        p.skip(|b| b == b',' || b.is_ascii_whitespace());
        let token = p.token();
        if token.is_empty() {
            // Garbage: skip one byte so the loop always advances.
            if p.i >= p.s.len() {
                break;
            }
            p.i += 1;
            continue;
        }
        p.skip(|b| b == b' ' || b == b'\t');
        if p.peek() == Some(b'=') {
            p.i += 1;
            p.skip(|b| b == b' ' || b == b'\t');
            let value = p.value();
            if let Some(c) = out.last_mut() {
                c.params.insert(token.to_ascii_lowercase(), value);
            }
        } else {
            out.push(Challenge {
                scheme: token.to_ascii_lowercase(),
                params: BTreeMap::new(),
            });
        }
    }
    out
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip(&mut self, f: impl Fn(u8) -> bool) {
        while self.peek().is_some_and(&f) {
            self.i += 1;
        }
    }

    /// An RFC 7230 token.
    fn token(&mut self) -> String {
        let start = self.i;
        self.skip(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }

    /// A quoted string (with `\` escapes) or a bare value up to the next comma.
    fn value(&mut self) -> String {
        if self.peek() != Some(b'"') {
            let start = self.i;
            self.skip(|b| b != b',' && !b.is_ascii_whitespace());
            return String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        }
        self.i += 1;
        let mut v = Vec::new();
        while let Some(b) = self.peek() {
            self.i += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    if let Some(n) = self.peek() {
                        v.push(n);
                        self.i += 1;
                    }
                }
                _ => v.push(b),
            }
        }
        String::from_utf8_lossy(&v).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_with_quoted_commas_and_a_second_challenge() {
        let h = r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull,push", Basic realm="x \"y\"""#;
        let cs = parse(h);
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0].scheme, "bearer");
        assert_eq!(cs[0].param("realm"), Some("https://auth.docker.io/token"));
        assert_eq!(cs[0].param("service"), Some("registry.docker.io"));
        assert_eq!(
            cs[0].param("scope"),
            Some("repository:library/busybox:pull,push")
        );
        assert_eq!(cs[1].scheme, "basic");
        assert_eq!(cs[1].param("realm"), Some("x \"y\""));
    }

    #[test]
    fn odd_spacing_case_and_bare_values() {
        let cs = parse(
            "  BEARER   Realm = http://127.0.0.1:5000/token ,Service=reg , error=\"invalid_token\"",
        );
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].scheme, "bearer");
        assert_eq!(cs[0].param("realm"), Some("http://127.0.0.1:5000/token"));
        assert_eq!(cs[0].param("service"), Some("reg"));
        assert_eq!(cs[0].param("error"), Some("invalid_token"));
        let basic = parse(r#"Basic realm="Registry Realm""#);
        assert_eq!(basic[0].scheme, "basic");
        assert!(parse("").is_empty());
        assert!(parse("\"unterminated").is_empty() || parse("\"unterminated")[0].params.is_empty());
        assert_eq!(
            parse(r#"Bearer realm="unterminated"#)[0].param("realm"),
            Some("unterminated")
        );
    }
}
