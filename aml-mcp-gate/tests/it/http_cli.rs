//! The HTTP flags on the command line: binding beyond loopback needs explicit flags, a bad
//! token file, URL or header is a usage error (exit 2) before anything listens, and
//! `--upstream` replaces the server command.

use crate::cli_support;

use cli_support::{gate, temp};

#[test]
fn http_usage_errors_exit_2_and_say_why() {
    let policy = temp(
        "policy.json",
        r#"{"protocol": "aml-action-policy/1", "rules": []}"#,
    );
    let tokens = temp("tokens", "a-token-long-enough-1234\n");
    let short = temp("short-tokens", "short\n");
    let empty = temp("empty-secret", "\n");
    const UP: &str = "http://127.0.0.1:9/mcp";
    const TOKEN_URL: &str = "http://127.0.0.1:9/token";
    let p = policy.as_str();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--policy", p, "--listen", "0.0.0.0:0", "--", "s"],
            "--listen-public",
        ),
        (
            vec![
                "--policy",
                p,
                "--listen",
                "0.0.0.0:0",
                "--listen-public",
                "--",
                "s",
            ],
            "--tokens",
        ),
        (
            vec!["--policy", p, "--listen-public", "--tokens", &tokens, "--", "s"],
            "--listen",
        ),
        (
            vec![
                "--policy",
                p,
                "--listen",
                "127.0.0.1:0",
                "--tokens",
                &short,
                "--",
                "s",
            ],
            "shorter than 16",
        ),
        (
            vec!["--policy", p, "--listen", "not-an-address", "--", "s"],
            "not-an-address",
        ),
        (
            vec!["--policy", p, "--listen", "localhost", "--", "s"],
            "HOST:PORT",
        ),
        (
            vec!["--policy", p, "--listen", "localhost:99999", "--", "s"],
            "port",
        ),
        (vec!["--policy", p, "--tokens", &tokens, "--", "s"], "--listen"),
        (
            vec!["--policy", p, "--upstream", "https://example.com/mcp"],
            "https",
        ),
        (
            vec!["--policy", p, "--upstream", "ftp://example.com/mcp"],
            "http:// URL",
        ),
        (
            vec!["--policy", p, "--upstream", "http://127.0.0.1:9/mcp", "--", "s"],
            "--upstream",
        ),
        (
            vec![
                "--policy",
                p,
                "--upstream",
                "http://127.0.0.1:9/mcp",
                "--upstream-header",
                "no colon",
            ],
            "NAME: VALUE",
        ),
        (
            vec!["--policy", p, "--upstream-token", &tokens, "--", "s"],
            "--upstream",
        ),
        // Client credentials toward the upstream: complete sets only, and never beside a
        // static token (`--state memory`: these get as far as the state).
        (
            vec![
                "--policy",
                p,
                "--state",
                "memory",
                "--upstream",
                UP,
                "--upstream-token-url",
                TOKEN_URL,
            ],
            "need --upstream-token-url, --upstream-client-id and --upstream-client-secret-file",
        ),
        (
            vec![
                "--policy",
                p,
                "--state",
                "memory",
                "--upstream",
                UP,
                "--upstream-client-id",
                "gate",
                "--upstream-client-secret-file",
                &tokens,
            ],
            "need --upstream-token-url",
        ),
        (
            vec![
                "--policy",
                p,
                "--upstream",
                UP,
                "--upstream-token",
                &tokens,
                "--upstream-token-url",
                TOKEN_URL,
            ],
            "cannot be used with",
        ),
        (
            vec![
                "--policy",
                p,
                "--state",
                "memory",
                "--upstream-client-id",
                "gate",
                "--",
                "s",
            ],
            "need --upstream",
        ),
        (
            vec![
                "--policy",
                p,
                "--state",
                "memory",
                "--upstream",
                UP,
                "--upstream-token-url",
                "https://as.example.com/token",
                "--upstream-client-id",
                "gate",
                "--upstream-client-secret-file",
                &tokens,
            ],
            "https is not built in",
        ),
        (
            vec![
                "--policy",
                p,
                "--state",
                "memory",
                "--upstream",
                UP,
                "--upstream-token-url",
                TOKEN_URL,
                "--upstream-client-id",
                "gate",
                "--upstream-client-secret-file",
                &empty,
            ],
            "no client secret",
        ),
        (
            vec![
                "--policy",
                p,
                "--state",
                "memory",
                "--upstream",
                UP,
                "--upstream-token-url",
                TOKEN_URL,
                "--upstream-client-id",
                "gate",
                "--upstream-client-secret-file",
                &tokens,
                "--upstream-header",
                "Authorization: Bearer x",
            ],
            "an Authorization header and client credentials",
        ),
        (
            vec!["--policy", p, "--upstream", UP, "--upstream-client-auth", "form"],
            "possible values: basic, post",
        ),
        (
            vec![
                "--policy",
                p,
                "--listen",
                "127.0.0.1:0",
                "--max-sessions",
                "0",
                "--",
                "s",
            ],
            "--max-sessions",
        ),
        (
            vec![
                "--policy",
                p,
                "--listen",
                "127.0.0.1:0",
                "--max-stateless-calls",
                "0",
                "--",
                "s",
            ],
            "--max-stateless-calls",
        ),
        (
            vec![
                "--policy",
                p,
                "--listen",
                "127.0.0.1:0",
                "--sse-keep-alive",
                "86401",
                "--",
                "s",
            ],
            "--sse-keep-alive",
        ),
        (
            vec![
                "--policy",
                p,
                "--listen",
                "127.0.0.1:0",
                "--sse-keep-alive",
                "soon",
                "--",
                "s",
            ],
            "--sse-keep-alive",
        ),
        (
            vec![
                "--policy",
                p,
                "--listen",
                "127.0.0.1:0",
                "--max-connections",
                "999999",
                "--",
                "s",
            ],
            "open files",
        ),
        (
            vec![
                "--policy",
                p,
                "--listen",
                "127.0.0.1:0",
                "--header-timeout",
                "0",
                "--",
                "s",
            ],
            "--header-timeout",
        ),
    ];
    for (args, why) in cases {
        let out = gate(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(why), "{args:?}: wanted {why:?} in {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn help_lists_the_http_flags() {
    let out = gate(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--listen <ADDR>",
        "--listen-public",
        "--tokens <FILE>",
        "--allow-origin <ORIGIN>",
        "--upstream <URL>",
        "--upstream-header",
        "--upstream-token <FILE>",
        "--upstream-token-url <URL>",
        "--upstream-client-id <ID>",
        "--upstream-client-secret-file <FILE>",
        "--upstream-scopes <A,B>",
        "--upstream-resource <URI>",
        "--upstream-client-auth <METHOD>",
        "--max-body-bytes",
        "--max-sessions",
        "--session-idle-timeout",
        "--max-calls-per-session",
        "--max-stateless-calls",
        "--sse-keep-alive",
        "--header-timeout",
        "--body-timeout",
        "--max-connections",
        "--max-sessions-per-client",
        "--unused-session-timeout",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help");
    }
}

#[test]
fn the_config_files_upstream_table_is_checked_like_the_flags() {
    let policy = temp(
        "upstream-policy.json",
        r#"{"protocol": "aml-action-policy/1", "rules": []}"#,
    );
    let cases = [
        (
            "[upstream]\nurl = \"http://127.0.0.1:9/mcp\"\ntoken_url = \"http://127.0.0.1:9/token\"\n",
            "need --upstream-token-url, --upstream-client-id and --upstream-client-secret-file",
        ),
        (
            "server = [\"sh\"]\n[upstream]\nurl = \"http://127.0.0.1:9/mcp\"\n",
            "name two servers",
        ),
        (
            "[upstream]\nurl = \"http://127.0.0.1:9/mcp\"\ntoken = \"t\"\nclient_id = \"gate\"\n",
            "two ways to authenticate",
        ),
        ("[upstream]\nclient_auth = \"form\"\n", "client_auth"),
    ];
    for (n, (text, why)) in cases.iter().enumerate() {
        let config = temp(&format!("upstream-gate-{n}.toml"), text);
        let out = gate(&["--config", &config, "--policy", &policy, "--state", "memory"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {stderr}");
        assert!(stderr.contains(why), "{text}: wanted {why:?} in {stderr}");
    }
}
