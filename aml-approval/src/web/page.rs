//! The page's shell: HTML escaping and the document around every page. Style and script are
//! files of their own (`/app.css`, `/app.js`), so the CSP allows no inline code at all.

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

/// The page's style sheet (`GET /app.css`).
pub(super) const STYLE: &str = include_str!("assets/app.css");
/// The page's script (`GET /app.js`): live updates, countdowns, keyboard use.
pub(super) const SCRIPT: &str = include_str!("assets/app.js");
/// The page's icon (`GET /icon.svg`), so browsers do not ask for `/favicon.ico` without
/// the token.
pub(super) const ICON: &str = include_str!("assets/icon.svg");

/// A whole page titled `title`; `data` are the `<body>` attributes the script reads.
pub(super) fn page(title: &str, token: &str, data: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t} — AML approvals</title><link rel=\"stylesheet\" href=\"/app.css?t={token}\">\
         <link rel=\"icon\" type=\"image/svg+xml\" href=\"/icon.svg?t={token}\"></head>\
         <body {data}><h1>{t}</h1>{body}<script src=\"/app.js?t={token}\"></script></body></html>",
        t = escape(title),
        token = escape(token),
    )
}
