//! SHA-256 digests of canonical bytes.

use core::fmt;
use core::str::FromStr;

use sha2::Digest as _;

/// A SHA-256 digest, written as 64 lowercase hex digits on the wire.
///
/// ```
/// use aml_core::Sha256Digest;
/// let d = Sha256Digest::of(b"abc");
/// assert_eq!(
///     d.to_string(),
///     "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
/// );
/// assert_eq!(d.to_string().parse::<Sha256Digest>().unwrap(), d);
/// assert!("BA78".parse::<Sha256Digest>().is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256Digest([u8; 32]);

/// A string that is not 64 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a sha-256 digest must be 64 lowercase hex digits")]
pub struct InvalidDigest;

impl Sha256Digest {
    /// Hashes `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Sha256Digest(sha2::Sha256::digest(bytes).into())
    }

    /// Wraps raw digest bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Sha256Digest(bytes)
    }

    /// The raw digest bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64-character lowercase hex form, without allocating.
    pub fn hex(&self) -> HexDigest {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 64];
        for (i, b) in self.0.iter().enumerate() {
            out[2 * i] = HEX[(b >> 4) as usize];
            out[2 * i + 1] = HEX[(b & 0xf) as usize];
        }
        HexDigest(out)
    }
}

/// Appends `"HEX"` (quoted) or `null`.
pub(crate) fn write_optional_hex(digest: Option<Sha256Digest>, out: &mut Vec<u8>) {
    match digest {
        Some(digest) => {
            out.push(b'"');
            out.extend_from_slice(digest.hex().as_str().as_bytes());
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
}

/// The lowercase hex text of a [`Sha256Digest`], on the stack.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HexDigest([u8; 64]);

impl HexDigest {
    /// The hex text.
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever written into the array.
        core::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Debug for HexDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.hex().as_str())
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256Digest({self})")
    }
}

impl FromStr for Sha256Digest {
    type Err = InvalidDigest;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return Err(InvalidDigest);
        }
        let nibble = |c: u8| match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            _ => Err(InvalidDigest),
        };
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
        }
        Ok(Sha256Digest(out))
    }
}

impl serde::Serialize for Sha256Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.hex().as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Sha256Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uppercase_and_wrong_length_are_refused() {
        let good = Sha256Digest::of(b"").to_string();
        assert_eq!(
            good,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(good.to_uppercase().parse::<Sha256Digest>().is_err());
        assert!(good[..62].parse::<Sha256Digest>().is_err());
        assert!(format!("{good}0").parse::<Sha256Digest>().is_err());
        assert!(serde_json::from_str::<Sha256Digest>("\"zz\"").is_err());
    }
}
