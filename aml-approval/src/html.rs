//! HTML for the approval page.

/// Escapes text for HTML content and attribute values.
pub(crate) fn escape(text: &str) -> String {
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
form{margin-top:1rem}.approve{background:#16a34a;color:#fff}.deny{background:#dc2626;color:#fff}.result{font-size:1.1rem}";

/// A whole page.
pub(crate) fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t} — AML approvals</title>\
         <style>{STYLE}</style></head><body><h1>{t}</h1>{body}</body></html>",
        t = escape(title)
    )
}
