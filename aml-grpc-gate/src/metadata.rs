//! Metadata forwarded by the host's allow-list, both ways; nothing else crosses.

use tonic::metadata::MetadataMap;

/// The metadata keys the host lets through (lower-case; `-bin` keys carry binary values).
#[derive(Debug, Clone, Default)]
pub struct Allowed(Vec<String>);

impl Allowed {
    /// An allow-list of `keys` (compared case-insensitively).
    pub fn new(keys: impl IntoIterator<Item = String>) -> Self {
        Allowed(keys.into_iter().map(|k| k.to_ascii_lowercase()).collect())
    }

    /// The entries of `metadata` whose keys are allowed.
    pub fn filter(&self, metadata: &MetadataMap) -> MetadataMap {
        let mut out = MetadataMap::new();
        if self.0.is_empty() {
            return out;
        }
        for entry in metadata.iter() {
            match entry {
                tonic::metadata::KeyAndValueRef::Ascii(key, value) if self.allows(key.as_str()) => {
                    out.append(key.clone(), value.clone());
                }
                tonic::metadata::KeyAndValueRef::Binary(key, value) if self.allows(key.as_str()) => {
                    out.append_bin(key.clone(), value.clone());
                }
                _ => {}
            }
        }
        out
    }

    fn allows(&self, key: &str) -> bool {
        self.0.iter().any(|k| k == key)
    }
}
