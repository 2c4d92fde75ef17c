//! HTML for the approval page. Everything that came from a proposal is shown through
//! [`shown`](crate::display::shown) (visible escapes) and then HTML-escaped.

use crate::display::{shown, shown_lines, ESCAPE_WARNING};

use super::Entry;

/// Escapes text for HTML content and attribute values.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1b1b1b}\
h1{font-size:1.4rem}h2{font-size:1.1rem;margin:0 0 .5rem}.effect{background:#fde68a;border-radius:.3rem;padding:0 .4rem;font-size:.9rem}\
.proposal{border:1px solid #ccc;border-radius:.5rem;padding:1rem;margin:1rem 0}pre{background:#f5f5f5;padding:.75rem;overflow:auto}\
code.digest{word-break:break-all}button{font-size:1rem;padding:.4rem 1.2rem;margin-right:.5rem;border-radius:.3rem;border:1px solid #888;cursor:pointer}\
form{margin-top:1rem}.approve{background:#16a34a;color:#fff}.deny{background:#dc2626;color:#fff}.result{font-size:1.1rem}\
.warning{background:#fee2e2;border:1px solid #dc2626;border-radius:.3rem;padding:.5rem .75rem;font-weight:600}";

/// A whole page.
pub(super) fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t} — AML approvals</title>\
         <style>{STYLE}</style></head><body><h1>{t}</h1>{body}</body></html>",
        t = escape(title)
    )
}

/// The pending proposals, each with its Approve and Deny buttons.
pub(super) fn listing<'a>(entries: impl Iterator<Item = &'a Entry>, token: &str) -> String {
    let mut body = String::new();
    for entry in entries {
        let p = &entry.pending.proposal;
        let pretty = aml_core::strict::parse_str(p.canonical_json())
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_default();
        let fields = [
            shown(p.tool()),
            shown(p.effect().as_str()),
            shown(p.resource()),
            shown(p.purpose()),
            shown_lines(&pretty),
            shown(p.canonical_json()),
        ];
        let warning = if fields.iter().any(|f| f.escaped) {
            format!("<p class=\"warning\">{}</p>", escape(ESCAPE_WARNING))
        } else {
            String::new()
        };
        let [tool, effect, resource, purpose, pretty, canonical] = fields.map(|f| escape(&f.text));
        let digest = p.digest().to_string();
        body.push_str(&format!(
            "<section class=\"proposal\" data-digest=\"{digest}\">\
             <h2>{tool} <span class=\"effect\">{effect}</span> → {resource}</h2>\
             <p class=\"purpose\">{purpose}</p>{warning}\
             <p>SHA-256 of the canonical bytes: <code class=\"digest\">{digest}</code></p>\
             <pre class=\"proposal-json\">{pretty}</pre>\
             <details><summary>Canonical bytes (what is signed and hashed)</summary><pre>{canonical}</pre></details>\
             <form method=\"post\" action=\"/decide\">\
             <input type=\"hidden\" name=\"t\" value=\"{token}\">\
             <input type=\"hidden\" name=\"grant_id\" value=\"{grant}\">\
             <input type=\"hidden\" name=\"proposal_sha256\" value=\"{digest}\">\
             <button type=\"submit\" name=\"decision\" value=\"approve\" class=\"approve\">Approve</button>\
             <button type=\"submit\" name=\"decision\" value=\"deny\" class=\"deny\">Deny</button>\
             </form></section>",
            token = escape(token),
            grant = escape(&entry.pending.grant_id),
        ));
    }
    if body.is_empty() {
        body.push_str("<p class=\"empty\">Nothing is waiting for a decision.</p>");
    }
    page("Pending proposals", &body)
}
