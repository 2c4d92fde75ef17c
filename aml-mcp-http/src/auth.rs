//! Client authentication: bearer tokens and the `Origin` allow-list.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The bearer tokens a front accepts. Kept as SHA-256 digests and compared in constant time,
/// so neither a token's bytes nor its length show in the time a check takes.
#[derive(Clone)]
pub struct Tokens {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} tokens)", self.digests.len())
    }
}

/// Why a token file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokensError {
    /// No token in it.
    #[error("no token in the file (one token per line; blank lines and lines starting with # are skipped)")]
    Empty,
    /// A token shorter than 16 characters (guessable).
    #[error("the token on line {0} is shorter than 16 characters")]
    TooShort(usize),
    /// A token with a character that cannot appear in an `Authorization` header.
    #[error("the token on line {0} holds a space or a control character")]
    BadCharacter(usize),
}

impl Tokens {
    /// Tokens from a file's text: one per line; blank lines and `#` comments skipped.
    ///
    /// ```
    /// let tokens = aml_mcp_http::Tokens::parse("# agents\nsecret-token-for-agent-1\n").unwrap();
    /// assert!(tokens.accepts(b"secret-token-for-agent-1"));
    /// assert!(!tokens.accepts(b"secret-token-for-agent-2"));
    /// ```
    pub fn parse(text: &str) -> Result<Tokens, TokensError> {
        let mut digests = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let token = line.trim();
            if token.is_empty() || token.starts_with('#') {
                continue;
            }
            if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(TokensError::BadCharacter(n + 1));
            }
            if token.len() < 16 {
                return Err(TokensError::TooShort(n + 1));
            }
            digests.push(Sha256::digest(token.as_bytes()).into());
        }
        if digests.is_empty() {
            return Err(TokensError::Empty);
        }
        Ok(Tokens { digests })
    }

    /// Whether `token` is one of them; every stored token is compared, in constant time.
    pub fn accepts(&self, token: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(token).into();
        let mut found = subtle::Choice::from(0);
        for known in &self.digests {
            found |= known.ct_eq(&digest);
        }
        found.into()
    }

    /// Whether an `Authorization` header value carries an accepted bearer token.
    pub(crate) fn accepts_header(&self, header: Option<&[u8]>) -> bool {
        let Some(value) = header else { return false };
        let Some(scheme) = value.get(..7) else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case(b"bearer ") {
            return false;
        }
        self.accepts(value[7..].trim_ascii())
    }
}

/// Whether an `Origin` header value is allowed: loopback origins and the host's list.
pub(crate) fn origin_allowed(origin: &[u8], allowed: &[String]) -> bool {
    let Ok(origin) = std::str::from_utf8(origin) else {
        return false;
    };
    if allowed.iter().any(|a| a.eq_ignore_ascii_case(origin)) {
        return true;
    }
    let Some(rest) = origin.strip_prefix("http://") else {
        return false;
    };
    let host = match rest.strip_prefix("[::1]") {
        Some(port) => return port.is_empty() || is_port(port),
        None => rest,
    };
    let (name, port) = match host.split_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    (name.eq_ignore_ascii_case("localhost") || name == "127.0.0.1")
        && port.is_none_or(|p| is_port(&format!(":{p}")))
}

fn is_port(text: &str) -> bool {
    text.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_whole_and_the_file_is_checked() {
        let tokens = Tokens::parse("\n# c\nabcdefghijklmnop\n  qrstuvwxyz012345  \n").unwrap();
        assert!(tokens.accepts_header(Some(b"Bearer abcdefghijklmnop")));
        assert!(tokens.accepts_header(Some(b"bearer qrstuvwxyz012345")));
        assert!(!tokens.accepts_header(Some(b"Bearer abcdefghijklmno")));
        assert!(!tokens.accepts_header(Some(b"Basic abcdefghijklmnop")));
        assert!(!tokens.accepts_header(None));
        assert!(matches!(Tokens::parse("# none\n"), Err(TokensError::Empty)));
        assert!(matches!(Tokens::parse("short"), Err(TokensError::TooShort(1))));
        assert!(matches!(
            Tokens::parse("abcdefgh ijklmnopq"),
            Err(TokensError::BadCharacter(1))
        ));
    }

    #[test]
    fn only_loopback_and_listed_origins_pass() {
        let allowed = vec!["https://app.example.com".to_string()];
        for ok in [
            "http://localhost",
            "http://localhost:3000",
            "http://127.0.0.1:8080",
            "http://[::1]:9",
            "https://app.example.com",
        ] {
            assert!(origin_allowed(ok.as_bytes(), &allowed), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.nip.io",
            "https://localhost",
            "null",
            "http://localhost:",
        ] {
            assert!(!origin_allowed(bad.as_bytes(), &allowed), "{bad}");
        }
    }
}
