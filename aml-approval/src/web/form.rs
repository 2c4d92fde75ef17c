//! `application/x-www-form-urlencoded` (query strings and form bodies).

use std::collections::BTreeMap;

/// The pairs of `text`; `None` if any is not valid percent-encoded UTF-8. A repeated name
/// keeps its first value.
pub(super) fn parse(text: &str) -> Option<BTreeMap<String, String>> {
    let mut pairs = BTreeMap::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        pairs.entry(decode(name)?).or_insert(decode(value)?);
    }
    Some(pairs)
}

fn decode(text: &str) -> Option<String> {
    let spaced = text.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode_and_bad_encodings_are_refused() {
        let form = parse("t=ab%20c&decision=approve&x=a+b&empty=&flag&t=second").unwrap();
        assert_eq!(form["t"], "ab c");
        assert_eq!(form["decision"], "approve");
        assert_eq!(form["x"], "a b");
        assert_eq!(form["empty"], "");
        assert_eq!(form["flag"], "");
        assert_eq!(parse("").unwrap().len(), 0);
        assert!(parse("a=%FF").is_none(), "not UTF-8");
        assert_eq!(
            parse("a=%2").unwrap()["a"],
            "%2",
            "an incomplete escape stays literal"
        );
        assert_eq!(parse("a=%e2%82%ac").unwrap()["a"], "€");
    }
}
