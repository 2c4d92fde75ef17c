//! The gate's approval page, driven from outside through its JSON API (docs/APPROVAL.md),
//! as an approver's integration would: the page's address and token from the gate's stderr,
//! its pending list polled with a deadline, a decision posted by grant id and digest.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use aml_test_support::Lines;
use serde_json::{json, Value};

/// The page of one gate run.
pub(super) struct Page {
    origin: String,
    token: String,
}

impl Page {
    /// The page the gate names on stderr (`… approve or deny pending calls at URL`).
    pub(super) fn from_log(log: &Lines, within: Duration) -> Page {
        let line = log.wait_for("pending calls at http://", within);
        let url = line.split(" at http://").nth(1).unwrap().trim();
        let (origin, token) = url.split_once("/?t=").unwrap();
        Page {
            origin: origin.to_owned(),
            token: token.to_owned(),
        }
    }

    /// The first pending request other than those in `seen` (by grant id), within `within`.
    pub(super) fn next_pending(&self, seen: &[&Value], within: Duration) -> Value {
        aml_test_support::wait_until("a new pending request on the page", within, || {
            let (status, list) = self.api("GET", "/api/v1/pending", None);
            assert_eq!(status, 200, "{list}");
            list["pending"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| seen.iter().all(|s| s["grant_id"] != p["grant_id"]))
                .cloned()
        })
    }

    /// Decides `pending` (`approve` or `deny`) by its grant id and the digest shown; the
    /// outcome the page answers.
    pub(super) fn decide(&self, pending: &Value, decision: &str) -> Value {
        let body = json!({"grant_id": pending["grant_id"], "proposal_sha256": pending["proposal_sha256"],
                          "decision": decision});
        let (status, answer) = self.api("POST", "/api/v1/decide", Some(&body));
        assert_eq!(status, 200, "{answer}");
        answer["outcome"].clone()
    }

    /// One request to the API with the token as a bearer token: the status and JSON body.
    fn api(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let (origin, token) = (&self.origin, &self.token);
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut stream = TcpStream::connect(origin).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {origin}\r\nAuthorization: Bearer {token}\r\nOrigin: http://{origin}\r\n\
             Connection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let status = answer.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
        (status, serde_json::from_str(body).unwrap_or(Value::Null))
    }
}
