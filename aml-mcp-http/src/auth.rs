//! Client authentication: bearer tokens and the `Origin` allow-list.

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

/// The bearer tokens a front accepts. Kept as SHA-256 digests and compared in constant time,
/// so neither a token's bytes nor its length show in the time a check takes.
#[derive(Clone)]
pub struct Tokens {
    digests: Vec<[u8; 32]>,
    /// Each token's caller name, in the same order.
    names: Vec<String>,
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
    /// A line with more than a name and a token.
    #[error("line {0} is not `TOKEN` or `NAME TOKEN`")]
    BadLine(usize),
    /// A caller name that is not one (control characters, too long, or `local`, which is
    /// the host's own agent on stdio).
    #[error("the name on line {0} is not a caller name: {1}")]
    BadName(usize, String),
    /// Two tokens with one name.
    #[error("the name {1:?} on line {0} is already another token's")]
    DuplicateName(usize, String),
    /// One token on two lines: it could name only one caller.
    #[error("the token on line {0} is already on an earlier line (one token, one caller)")]
    DuplicateToken(usize),
}

impl Tokens {
    /// Tokens from a file's text: one per line, alone or after the caller's name and a
    /// space (`NAME TOKEN`); blank lines and `#` comments skipped. The name is the caller
    /// the gate's policy, budgets and records know the client by; a token without one is
    /// `token-N`, N counting tokens from 1 in file order.
    ///
    /// ```
    /// let tokens = aml_mcp_http::Tokens::parse("# agents\nsecret-token-for-agent-1\nci-bot secret-token-for-the-ci-bot\n").unwrap();
    /// assert!(tokens.accepts(b"secret-token-for-agent-1"));
    /// assert!(!tokens.accepts(b"secret-token-for-agent-2"));
    /// assert_eq!(tokens.name_of(b"secret-token-for-the-ci-bot"), Some("ci-bot"));
    /// assert_eq!(tokens.name_of(b"secret-token-for-agent-1"), Some("token-1"));
    /// assert!(aml_mcp_http::Tokens::parse("local secret-token-for-agent-1").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Tokens, TokensError> {
        let mut digests = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (name, token) = match fields[..] {
                [token] => (format!("token-{}", digests.len() + 1), token),
                [name, token] => (name.to_owned(), token),
                _ => return Err(TokensError::BadLine(n + 1)),
            };
            if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(TokensError::BadCharacter(n + 1));
            }
            if token.len() < 16 {
                return Err(TokensError::TooShort(n + 1));
            }
            let caller = aml_mcp::Caller::new(&name).map_err(|why| TokensError::BadName(n + 1, why))?;
            if caller.is_local() {
                let why = "`local` is the host's own agent on stdio".to_owned();
                return Err(TokensError::BadName(n + 1, why));
            }
            if names.contains(&name) {
                return Err(TokensError::DuplicateName(n + 1, name));
            }
            let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            if digests.contains(&digest) {
                return Err(TokensError::DuplicateToken(n + 1));
            }
            digests.push(digest);
            names.push(name);
        }
        if digests.is_empty() {
            return Err(TokensError::Empty);
        }
        Ok(Tokens { digests, names })
    }

    /// The caller name of `token`, if it is one of them.
    pub fn name_of(&self, token: &[u8]) -> Option<&str> {
        self.find(token).map(|n| self.names[n].as_str())
    }

    /// The caller name of the token a client presented.
    pub(crate) fn name(&self, id: TokenId) -> &str {
        &self.names[id.0]
    }

    /// Whether `token` is one of them; every stored token is compared, in constant time.
    pub fn accepts(&self, token: &[u8]) -> bool {
        self.find(token).is_some()
    }

    /// Which of them `token` is (its place in the file, from 0); every stored token is
    /// compared, and the place chosen, in constant time.
    fn find(&self, token: &[u8]) -> Option<usize> {
        let digest: [u8; 32] = Sha256::digest(token).into();
        let mut found = subtle::Choice::from(0);
        let mut place = 0u64;
        for (n, known) in self.digests.iter().enumerate() {
            let same = known.ct_eq(&digest);
            place = u64::conditional_select(&place, &(n as u64), same);
            found |= same;
        }
        bool::from(found).then_some(place as usize)
    }

    /// The token an `Authorization` header value carries as a bearer token, if it is one of
    /// them.
    pub(crate) fn identify_header(&self, header: Option<&[u8]>) -> Option<TokenId> {
        self.find(bearer(header?)?).map(TokenId)
    }
}

/// The token of an `Authorization: Bearer …` header value.
pub(crate) fn bearer(value: &[u8]) -> Option<&[u8]> {
    let scheme = value.get(..7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| value[7..].trim_ascii())
}

/// Which accepted token a client presented: its place in the token file (never the token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TokenId(usize);

/// Who a request is from, for session quotas and ownership: the static token it presented,
/// the subject of its JWT, or, on a front without either, the address it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Client {
    Token(TokenId),
    /// A JWT's `sub`; kept apart from a static token of the same name (their sessions too).
    Subject(std::sync::Arc<str>),
    Address(std::net::IpAddr),
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // Numbered as a person counts the tokens in the file.
            Client::Token(TokenId(n)) => write!(f, "token #{}", n + 1),
            Client::Subject(sub) => write!(f, "subject {sub:?}"),
            Client::Address(ip) => write!(f, "address {ip}"),
        }
    }
}

/// Whether an `Origin` header value is allowed: the front's own origins and the host's
/// list, compared whole. Any other page, on any host or port (loopback ones too: any local
/// program may serve a page there), is refused.
pub(crate) fn origin_allowed(origin: &[u8], own: &[String], allowed: &[String]) -> bool {
    let Ok(origin) = std::str::from_utf8(origin) else {
        return false;
    };
    own.iter().chain(allowed).any(|a| a.eq_ignore_ascii_case(origin))
}

/// The origins a page served from this listening address would have: `http://ADDR`, and
/// for a loopback address `http://localhost:PORT` too.
pub(crate) fn own_origins(addr: std::net::SocketAddr) -> Vec<String> {
    let mut own = vec![format!("http://{addr}")];
    if addr.ip().is_loopback() {
        own.push(format!("http://localhost:{}", addr.port()));
    }
    own
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_whole_and_the_file_is_checked() {
        let tokens = Tokens::parse("\n# c\nabcdefghijklmnop\n  qrstuvwxyz012345  \n").unwrap();
        let id = |header: Option<&[u8]>| tokens.identify_header(header);
        assert_eq!(id(Some(b"Bearer abcdefghijklmnop")), Some(TokenId(0)));
        assert_eq!(id(Some(b"bearer qrstuvwxyz012345")), Some(TokenId(1)));
        assert_eq!(Client::Token(TokenId(1)).to_string(), "token #2");
        assert_eq!(id(Some(b"Bearer abcdefghijklmno")), None);
        assert_eq!(id(Some(b"Basic abcdefghijklmnop")), None);
        assert_eq!(id(None), None);
        assert!(matches!(Tokens::parse("# none\n"), Err(TokensError::Empty)));
        assert!(matches!(Tokens::parse("short"), Err(TokensError::TooShort(1))));
        assert!(matches!(
            Tokens::parse("abcdefgh\u{1}ijklmnopq"),
            Err(TokensError::BadCharacter(1))
        ));
        // `NAME TOKEN`: the second field is the token.
        assert!(matches!(
            Tokens::parse("alice ijklmnopq"),
            Err(TokensError::TooShort(1))
        ));
    }

    #[test]
    fn a_token_may_name_its_caller_and_names_are_checked() {
        let tokens = Tokens::parse(
            "ci-bot abcdefghijklmnop
qrstuvwxyz012345
	alice	0123456789abcdef  
",
        )
        .unwrap();
        let named = |token: &[u8]| tokens.name_of(token).map(str::to_owned);
        assert_eq!(named(b"abcdefghijklmnop").as_deref(), Some("ci-bot"));
        assert_eq!(named(b"qrstuvwxyz012345").as_deref(), Some("token-2"));
        assert_eq!(named(b"0123456789abcdef").as_deref(), Some("alice"));
        assert_eq!(named(b"ci-bot"), None, "a name is not a token");
        let id = tokens.identify_header(Some(b"Bearer 0123456789abcdef")).unwrap();
        assert_eq!(tokens.name(id), "alice");
        let refused = |text: &str| {
            Tokens::parse(text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(refused("a b abcdefghijklmnop").contains("line 1 is not"));
        assert!(refused("local abcdefghijklmnop").contains("host's own agent"));
        assert!(refused(&format!("{} abcdefghijklmnop", "n".repeat(300))).contains("at most 256"));
        assert!(refused(
            "x abcdefghijklmnop
x qrstuvwxyz012345"
        )
        .contains("line 2 is already"));
        // One token under two names would let the file's order pick the caller: refused.
        assert!(matches!(
            Tokens::parse("bob abcdefghijklmnop\nalice abcdefghijklmnop"),
            Err(TokensError::DuplicateToken(2))
        ));
        // An unnamed token's default name is taken by a named one: refused, not merged.
        assert!(refused(
            "token-2 abcdefghijklmnop
qrstuvwxyz012345"
        )
        .contains("already"));
    }

    #[test]
    fn only_the_fronts_own_and_listed_origins_pass() {
        let allowed = vec!["https://app.example.com".to_string()];
        let own = own_origins("127.0.0.1:8080".parse().unwrap());
        let own6 = own_origins("[::1]:9".parse().unwrap());
        assert_eq!(own6, ["http://[::1]:9", "http://localhost:9"]);
        for ok in [
            "http://localhost:8080",
            "http://127.0.0.1:8080",
            "HTTP://LOCALHOST:8080",
            "https://app.example.com",
        ] {
            assert!(origin_allowed(ok.as_bytes(), &own, &allowed), "{ok}");
        }
        for bad in [
            "http://localhost",
            "http://localhost:3000",
            "http://127.0.0.1:8081",
            "http://[::1]:8080",
            "http://evil.example",
            "http://localhost.evil.example:8080",
            "https://localhost:8080",
            "null",
        ] {
            assert!(!origin_allowed(bad.as_bytes(), &own, &allowed), "{bad}");
        }
        let public = own_origins("192.0.2.1:80".parse().unwrap());
        assert_eq!(public, ["http://192.0.2.1:80"]);
    }
}
