//! A proposal's arguments as a readable tree: objects and arrays nested, long strings
//! folded, every key and string shown through [`shown`] (hidden characters as escapes).

use serde_json::Value;

use super::page::escape;
use crate::display::shown;

/// Strings longer than this (in characters) are folded.
const FOLD_AT: usize = 160;
/// How much of a folded string shows before it is unfolded.
const PREVIEW: usize = 80;
/// Deeper levels are not drawn (the canonical bytes below the tree hold everything).
const MAX_DEPTH: usize = 32;

/// The HTML of `value`'s tree, and whether any character had to be escaped.
pub(super) fn render(value: &Value) -> (String, bool) {
    let mut out = String::new();
    let mut escaped = false;
    node(value, 0, &mut out, &mut escaped);
    (out, escaped)
}

fn text(raw: &str, escaped: &mut bool) -> String {
    let s = shown(raw);
    *escaped |= s.escaped();
    escape(s.text())
}

fn node(value: &Value, depth: usize, out: &mut String, escaped: &mut bool) {
    if depth >= MAX_DEPTH && matches!(value, Value::Object(_) | Value::Array(_)) {
        out.push_str("<span class=\"deep\">… (nested deeper; see the canonical bytes)</span>");
        return;
    }
    match value {
        Value::Object(map) if map.is_empty() => out.push_str("<span class=\"lit\">{}</span>"),
        Value::Array(list) if list.is_empty() => out.push_str("<span class=\"lit\">[]</span>"),
        Value::Object(map) => {
            out.push_str("<ul class=\"obj\">");
            for (key, item) in map {
                out.push_str("<li><span class=\"key\">");
                out.push_str(&text(key, escaped));
                out.push_str("</span>: ");
                node(item, depth + 1, out, escaped);
                out.push_str("</li>");
            }
            out.push_str("</ul>");
        }
        Value::Array(list) => {
            out.push_str("<ol class=\"arr\" start=\"0\">");
            for item in list {
                out.push_str("<li>");
                node(item, depth + 1, out, escaped);
                out.push_str("</li>");
            }
            out.push_str("</ol>");
        }
        Value::String(s) => string(s, out, escaped),
        Value::Number(n) => out.push_str(&format!("<span class=\"num\">{n}</span>")),
        Value::Bool(b) => out.push_str(&format!("<span class=\"lit\">{b}</span>")),
        Value::Null => out.push_str("<span class=\"lit\">null</span>"),
    }
}

fn string(s: &str, out: &mut String, escaped: &mut bool) {
    let length = s.chars().count();
    if length <= FOLD_AT {
        out.push_str(&format!("<span class=\"str\">\"{}\"</span>", text(s, escaped)));
        return;
    }
    // The preview is cut from the text itself, so an escape is never cut in two.
    let preview: String = s.chars().take(PREVIEW).collect();
    out.push_str(&format!(
        "<details class=\"long\"><summary><span class=\"str\">\"{}…</span> <span class=\"len\">({length} characters)</span></summary>\
         <pre class=\"str\">{}</pre></details>",
        text(&preview, escaped),
        text(s, escaped)
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_values_long_strings_and_hidden_characters() {
        let long = "word ".repeat(50);
        let (html, escaped) = render(&json!({
            "to": "team@example.test",
            "tags": ["a", 2, true, null, {}],
            "body": long,
            "k\u{202E}ey": "x<y",
        }));
        assert!(escaped, "the bidi control in a key");
        assert!(
            html.contains("<span class=\"key\">k\\u{202E}ey</span>: <span class=\"str\">\"x&lt;y\"</span>"),
            "{html}"
        );
        assert!(html.contains("<ol class=\"arr\" start=\"0\"><li><span class=\"str\">\"a\"</span></li><li><span class=\"num\">2</span></li>"), "{html}");
        assert!(html.contains("<details class=\"long\"><summary>"), "{html}");
        assert!(html.contains("(250 characters)"), "{html}");
        assert!(!html.contains('\u{202E}'));
        let (plain, escaped) = render(&json!({"a": "line\nbreak"}));
        assert!(escaped && plain.contains("line\\u{000A}break"), "{plain}");
        let mut deep = json!(1);
        for _ in 0..40 {
            deep = json!([deep]);
        }
        assert!(render(&deep).0.contains("nested deeper"));
    }
}
