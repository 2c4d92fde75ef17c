//! What an approver sees: text with every character that could make it read differently
//! from its bytes shown as a visible escape.
//!
//! Escaped: control characters (C0, DEL, C1 such as U+009B), bidirectional controls
//! (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C), invisible format characters
//! (zero-width spaces and joiners, U+2060–U+2064, U+FEFF, soft hyphen, tag characters and
//! the like), line and paragraph separators, Hangul fillers, and variation selectors.
//! Each becomes `\u{XXXX}`; a literal backslash stays as it is. The digest is always of the
//! exact bytes: escaping is for display only.
//!
//! The page, the terminal prompt and the `aml-approval` command all show text through
//! [`shown`]; hosts that show a proposal or an id elsewhere can use it too.

/// Text made safe to show, and whether anything had to be escaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub(crate) text: String,
    pub(crate) escaped: bool,
}

impl Shown {
    /// The text, with hidden characters written as `\u{XXXX}`.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether any character had to be escaped.
    pub fn escaped(&self) -> bool {
        self.escaped
    }
}

impl core::fmt::Display for Shown {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.text)
    }
}

/// The warning shown once when anything was escaped.
pub(crate) const ESCAPE_WARNING: &str =
    "Warning: this proposal contains control, bidirectional or invisible \
characters; they are shown as \\u{…} escapes. The digest covers the exact bytes.";

/// Whether `c` must not reach a person's screen raw.
pub fn hidden(c: char) -> bool {
    let u = u32::from(c);
    c.is_control()
        || matches!(
            u,
            0x00AD | 0x034F | 0x061C | 0x0600..=0x0605 | 0x06DD | 0x070F | 0x0890..=0x0891 | 0x08E2
                | 0x115F | 0x1160 | 0x17B4 | 0x17B5 | 0x180B..=0x180F | 0x200B..=0x200F
                | 0x2028..=0x202E | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F | 0xFEFF
                | 0xFFA0 | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F
                | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A | 0xE0000..=0xE0FFF
        )
}

/// `text` with every [`hidden`] character escaped as `\u{XXXX}`.
///
/// ```
/// let shown = aml_approval::display::shown("grant\u{1b}[2J");
/// assert_eq!(shown.text(), "grant\\u{001B}[2J");
/// assert!(shown.escaped());
/// ```
pub fn shown(text: &str) -> Shown {
    let mut out = String::with_capacity(text.len());
    let mut escaped = false;
    for c in text.chars() {
        if hidden(c) {
            escaped = true;
            out.push_str(&format!("\\u{{{:04X}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Shown { text: out, escaped }
}

/// A proposal's fields as a person is shown them: its tool, effect, resource, purpose and
/// canonical bytes, each [`shown`] (the page, the terminal and the API show these).
pub(crate) fn proposal_fields(p: &aml_core::FrozenProposal) -> [Shown; 5] {
    [
        shown(p.tool()),
        shown(p.effect().as_str()),
        shown(p.resource()),
        shown(p.purpose()),
        shown(p.canonical_json()),
    ]
}

/// `text` [`shown`], in double quotes: how ids appear in messages.
pub fn quoted(text: &str) -> String {
    format!("\"{}\"", shown(text))
}

#[cfg(feature = "web")]
/// Like [`shown`] for multi-line text whose line breaks are layout (pretty-printed JSON,
/// where a line break inside a string is always written `\n`): breaks stay breaks.
pub(crate) fn shown_lines(text: &str) -> Shown {
    let lines: Vec<Shown> = text.split('\n').map(shown).collect();
    Shown {
        escaped: lines.iter().any(|l| l.escaped),
        text: lines.into_iter().map(|l| l.text).collect::<Vec<_>>().join("\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "web")]
    fn pretty_printed_line_breaks_stay_breaks() {
        assert_eq!(
            shown_lines("{\n  \"a\": \"\u{202E}\"\n}"),
            Shown {
                text: "{\n  \"a\": \"\\u{202E}\"\n}".into(),
                escaped: true
            }
        );
        assert!(!shown_lines("{\n  \"a\": 1\n}").escaped);
    }

    #[test]
    fn controls_bidi_and_invisible_characters_become_visible_escapes() {
        let cases = [
            ("plain text, é and 😀", "plain text, é and 😀", false),
            ("csi\u{9B}31m", "csi\\u{009B}31m", true),
            ("esc\u{1B}[2J", "esc\\u{001B}[2J", true),
            ("evil\u{202E}gnp.exe", "evil\\u{202E}gnp.exe", true),
            ("zero\u{200B}width", "zero\\u{200B}width", true),
            ("isolate\u{2066}x\u{2069}", "isolate\\u{2066}x\\u{2069}", true),
            ("bom\u{FEFF}", "bom\\u{FEFF}", true),
            ("tag\u{E0041}", "tag\\u{E0041}", true),
            ("line\u{2028}sep", "line\\u{2028}sep", true),
            ("new\nline", "new\\u{000A}line", true),
            ("back\\slash", "back\\slash", false),
        ];
        for (input, text, escaped) in cases {
            assert_eq!(
                shown(input),
                Shown {
                    text: text.into(),
                    escaped
                },
                "{input:?}"
            );
        }
    }
}
