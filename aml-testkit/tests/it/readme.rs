//! The README's and every `docs/*.md` page's commands, run the way a newcomer runs them.
//! Every line of every fenced `sh` block is either run here, with the same arguments,
//! through the binaries this test build made, run by the test named in `delegated`, or named
//! in `not_run` with the reason; a command that is none of these fails the test, naming its
//! page, so the docs cannot drift from what works. `readme/links.rs` checks every link, path
//! and ADR the prose cites.
//!
//! `cargo run [--release] -p aml-testkit -- ARGS` runs the built `aml-testkit` with ARGS;
//! `target/release/aml-mcp-gate` is the built `aml-mcp-gate`, `aml-approval` the built
//! `aml-approval`; `npx -y @modelcontextprotocol/server-filesystem@VERSION` is the same
//! pinned package that `scripts/interop-setup` installed. The gate is driven by the official
//! Python MCP SDK.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use aml_core::canonical::to_canonical_string;
use aml_core::Sha256Digest;
use serde_json::{json, Value};

#[path = "readme/links.rs"]
mod links;

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// One fenced `sh` block: its command lines, and the ```json block that follows it (before
/// any other fence), which shows what the block prints.
#[derive(Debug)]
struct ShBlock {
    commands: Vec<String>,
    /// Per command: the JSON object a `# {…}` comment line right after it shows it prints
    /// (a subset of what it prints; text after the object is prose).
    expected: Vec<Option<Value>>,
    shown_output: Option<String>,
}

fn sh_blocks(readme: &str) -> Vec<ShBlock> {
    let mut blocks: Vec<ShBlock> = Vec::new();
    let mut lines = readme.lines();
    let mut last_was_sh = false;
    while let Some(line) = lines.next() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        match info.trim() {
            "sh" => {
                let (mut commands, mut expected) = (Vec::new(), Vec::new());
                let mut continued: Option<String> = None;
                for line in &body {
                    if let Some(shown) = line.trim_start().strip_prefix("# {") {
                        let first = serde_json::Deserializer::from_str(&format!("{{{shown}"))
                            .into_iter::<Value>()
                            .next()
                            .map(|v| v.unwrap_or_else(|e| panic!("README comment {line:?}: {e}")));
                        let last: &mut Option<Value> =
                            expected.last_mut().expect("a `# {…}` comment follows a command");
                        *last = first;
                        continue;
                    }
                    let command = strip_comment(line).trim();
                    // A line ending in `\` continues on the next.
                    if let Some(open) = continued.as_mut() {
                        open.push(' ');
                        open.push_str(command.trim_end_matches('\\').trim());
                    } else if !command.is_empty() {
                        continued = Some(command.trim_end_matches('\\').trim().to_owned());
                    }
                    if !command.ends_with('\\') {
                        if let Some(done) = continued.take() {
                            commands.push(done);
                            expected.push(None);
                        }
                    }
                }
                blocks.push(ShBlock {
                    commands,
                    expected,
                    shown_output: None,
                })
            }
            "json" if last_was_sh => blocks.last_mut().unwrap().shown_output = Some(body.join("\n")),
            _ => {}
        }
        last_was_sh = info.trim() == "sh";
    }
    blocks
}

/// The line without a `# comment` (a `#` at the start or after a space, outside quotes).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if previous.is_whitespace() => return &line[..i],
            _ => {}
        }
        previous = c;
    }
    line
}

/// Shell words: whitespace-separated, with '…' and "…" quoting (no escapes, no expansion);
/// an unquoted `|` or `>` is a word of its own.
fn words(line: &str) -> Vec<String> {
    let (mut out, mut word, mut quote, mut in_word) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => (quote, in_word) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, c) if c.is_whitespace() || c == '|' || c == '>' => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
                if c == '|' || c == '>' {
                    out.push(c.to_string());
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    assert!(quote.is_none(), "unbalanced quote in README command {line:?}");
    if in_word {
        out.push(word);
    }
    out
}

/// A parsed README command: `VAR=value … [echo TEXT |] PROGRAM ARGS… [> FILE]`.
#[derive(Debug)]
struct ReadmeCommand {
    line: String,
    env: Vec<(String, String)>,
    stdin: Option<String>,
    argv: Vec<String>,
    /// `> FILE`: where stdout goes.
    stdout_to: Option<String>,
}

fn parse(line: &str) -> ReadmeCommand {
    let mut words = words(line);
    let mut stdin = None;
    if let Some(pipe) = words.iter().position(|w| w == "|") {
        let (echo, rest) = words.split_at(pipe);
        assert!(
            echo.len() == 2 && echo[0] == "echo",
            "README command {line:?}: only `echo TEXT | …` pipes are understood here"
        );
        stdin = Some(format!("{}\n", echo[1]));
        words = rest[1..].to_vec();
    }
    let mut stdout_to = None;
    if let Some(arrow) = words.iter().position(|w| w == ">") {
        assert_eq!(
            arrow + 2,
            words.len(),
            "README command {line:?}: `> FILE` ends a command"
        );
        stdout_to = words.pop();
        words.pop();
    }
    let assignments = words
        .iter()
        .take_while(|w| w.contains('=') && !w.starts_with('-'))
        .count();
    let env = words[..assignments]
        .iter()
        .map(|w| {
            let (k, v) = w.split_once('=').unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect();
    ReadmeCommand {
        line: line.to_owned(),
        env,
        stdin,
        argv: words[assignments..].to_vec(),
        stdout_to,
    }
}

/// Runs `command` to completion within `limit`, or kills it and fails.
fn output_within(
    command: &mut Command,
    stdin: Option<&str>,
    limit: Duration,
) -> (Option<i32>, String, String) {
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
    if let Some(text) = stdin {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes).unwrap();
            String::from_utf8(bytes).unwrap()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    /// Kills the child if the wait fails (the panic unwinds through it).
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            if self.0.try_wait().ok().flatten().is_none() {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
    }
    let mut child = Killed(child);
    let status = aml_test_support::wait_until(&format!("{command:?} to finish"), limit, || {
        child.0.try_wait().unwrap()
    });
    (status.code(), out.join().unwrap(), err.join().unwrap())
}

/// The pages whose `sh` blocks are run: the README, then every `docs/*.md` by name.
fn pages() -> Vec<(String, String)> {
    let mut names: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    names.sort();
    names.insert(0, "README.md".to_owned());
    names
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(repo().join(&name)).unwrap();
            (name, text)
        })
        .collect()
}

/// What the commands of one run share: a server a command starts stays up for the commands
/// after it on its page; the quick start's directory; a scratch directory for commands that
/// write files.
#[derive(Default)]
struct Run {
    ran: Vec<String>,
    server: Option<Background>,
    quick_start: Option<QuickStart>,
    scratch: Option<Scratch>,
}

/// Runs every command of `page` (named `name`), or fails naming the first one no test runs.
fn run_page(run: &mut Run, name: &str, page: &str, readme: &str) {
    for block in &sh_blocks(page) {
        if delegated(name, block) {
            continue;
        }
        for (line, expected) in block.commands.iter().zip(&block.expected) {
            let command = parse(line);
            let argv: Vec<&str> = command.argv.iter().map(String::as_str).collect();
            match argv.as_slice() {
                ["cargo", "run", "-p", "aml-testkit", "--", args @ ..]
                | ["cargo", "run", "--release", "-p", "aml-testkit", "--", args @ ..] => {
                    testkit_command(&command, args, block.shown_output.as_deref(), readme)
                }
                ["cargo", "build", "--release", "-p", "aml-mcp-gate"] => {
                    // This test's binaries are built (crate::bins builds them if need be).
                    crate::bins::gate();
                }
                ["target/release/aml-mcp-gate", "init", args @ ..] => {
                    run.quick_start = Some(quick_start_init(&command, args))
                }
                ["target/release/aml-mcp-gate", args @ ..] if args.contains(&"gate/policy.json") => {
                    let dir = run.quick_start.as_ref().expect("the quick start's init ran first");
                    quick_start_run(&command, args, dir.path())
                }
                ["target/release/aml-mcp-gate", args @ ..] => gate_command(&command, args),
                ["cargo", "run", "-p", "aml-a2ui", "--example", "gate_stdio", "--", args @ ..] => {
                    a2ui_example(&command, args, block.shown_output.as_deref())
                }
                ["cargo", "run", "-p", "aml-grpc", "--example", "tool_server", "--", args @ ..] => {
                    run.server = Some(grpc_example_server(args))
                }
                ["target/interop/venv/bin/python", "scripts/interop/grpc_calls.py", args @ ..] => {
                    assert!(run.server.is_some(), "{line}: no server was started before");
                    python_grpc_call(&command, args, expected.as_ref())
                }
                ["aml-approval", args @ ..] => {
                    let scratch = run.scratch.get_or_insert_with(Scratch::new);
                    approval_command(&command, args, &scratch.0)
                }
                ["bash", "scripts/test"] => not_run(&command),
                ["bash", "scripts/fuzz", args @ ..] => fuzz_command(&command, args),
                other => panic!(
                    "{name}: command {line:?} ({other:?}) is not run by any test: teach aml-testkit/tests/it/readme.rs to run it"
                ),
            }
            run.ran.push(line.clone());
        }
    }
    // A server runs only for the page that started it.
    run.server = None;
}

/// A block another test runs as the page shows it: the approval API's curl commands
/// (`aml-approval/tests/it/api.rs` starts a page and runs them against it; they need its URL).
fn delegated(page: &str, block: &ShBlock) -> bool {
    // Each command is `curl …` or sets a shell variable for them (`URL='…'`).
    let curl = block.commands.iter().all(|c| {
        let first = c.split_whitespace().next().unwrap_or_default();
        first == "curl"
            || first
                .split_once('=')
                .is_some_and(|(name, _)| name.chars().all(|c| c.is_ascii_uppercase()))
    });
    if page != "docs/APPROVAL.md" || !curl {
        return false;
    }
    let api = std::fs::read_to_string(repo().join("aml-approval/tests/it/api.rs")).unwrap();
    assert!(
        api.contains("docs/APPROVAL.md shows the curl commands"),
        "{page}: its curl commands are no longer run by aml-approval/tests/it/api.rs"
    );
    true
}

#[test]
fn every_command_of_the_readme_and_the_docs_runs_and_does_what_the_page_says() {
    let pages = pages();
    let readme = pages[0].1.clone();
    let mut run = Run::default();
    for (name, page) in &pages {
        run_page(&mut run, name, page, &readme);
    }
    let ran = run.ran;
    // The main commands are among them (a parser bug must not make this vacuous).
    for expected in [
        "cargo run --release -p aml-testkit -- rehearse",
        "cargo run -p aml-testkit -- case examples/case.json",
        "bash scripts/test",
        "aml-approval keygen alice alice.key",
    ] {
        assert!(
            ran.iter().any(|l| l == expected),
            "{expected:?} not found in {ran:#?}"
        );
    }
    assert!(
        ran.iter()
            .any(|l| l.starts_with("echo ") && l.ends_with("canonicalize")),
        "{ran:#?}"
    );
    assert!(
        ran.iter().any(|l| l.starts_with("target/release/aml-mcp-gate ")),
        "{ran:#?}"
    );
}

/// A docs page with a command no test knows fails the run, naming the page and the command.
#[test]
#[should_panic(expected = "docs/NEW.md: command \"aml-mcp-gate --no-such-flag\"")]
fn a_command_no_test_runs_fails_the_docs_test() {
    let page = "# New\n\n```sh\naml-mcp-gate --no-such-flag\n```\n";
    run_page(&mut Run::default(), "docs/NEW.md", page, "");
}

/// A docs command that runs but fails (here an `aml-approval` command given a key file that
/// does not exist) fails the run.
#[test]
#[should_panic(expected = "aml-approval public missing.key")]
fn a_docs_command_that_fails_fails_the_docs_test() {
    let page = "# New\n\n```sh\naml-approval public missing.key\n```\n";
    run_page(&mut Run::default(), "docs/NEW.md", page, "");
}

/// A directory of its own for the commands of one run that write files; removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = aml_test_support::scratch_dir("docs-scratch", &n.to_string());
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `aml-approval ARGS [> FILE]`, run in `dir` (the commands of one page share it) with the
/// binary this test build made: it must succeed, and what it prints must be JSON when a
/// `# {…}` comment or a file is not given for it (keygen, public: a keyring entry; sign: a
/// statement).
fn approval_command(command: &ReadmeCommand, args: &[&str], dir: &std::path::Path) {
    let binary = crate::bins::approval();
    let mut process = Command::new(&binary);
    process.args(args).current_dir(dir);
    let (code, stdout, stderr) = output_within(&mut process, None, Duration::from_secs(30));
    assert_eq!(code, Some(0), "{}: {stderr}", command.line);
    let printed: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{}: prints no JSON ({e}): {stdout}", command.line));
    match args.first() {
        Some(&"keygen") | Some(&"public") => {
            assert!(
                printed["public_key"].as_str().is_some_and(|k| k.len() == 64),
                "{printed}"
            )
        }
        Some(&"sign") => assert_eq!(printed["protocol"], "aml-approval-statement/1"),
        _ => {}
    }
    if let Some(file) = &command.stdout_to {
        std::fs::write(dir.join(file), &stdout).unwrap();
    }
}

/// `bash scripts/fuzz SECONDS [TARGET...]` needs the nightly toolchain and minutes, so it
/// is not run here (`.ci/run` runs it); its arguments must be what the script takes: a
/// positive number of seconds and targets that `fuzz/Cargo.toml` declares.
fn fuzz_command(command: &ReadmeCommand, args: &[&str]) {
    assert!(command.env.is_empty(), "{}", command.line);
    let script = std::fs::read_to_string(repo().join("scripts/fuzz")).unwrap();
    assert!(
        script.contains("seconds=${1:-"),
        "scripts/fuzz no longer takes SECONDS first"
    );
    let (seconds, targets) = args.split_first().expect("scripts/fuzz SECONDS");
    assert!(
        seconds.parse::<u32>().is_ok_and(|s| s > 0),
        "{}: SECONDS must be a positive integer",
        command.line
    );
    let manifest = std::fs::read_to_string(repo().join("fuzz/Cargo.toml")).unwrap();
    for target in targets {
        assert!(
            manifest.contains(&format!("[[bin]]\nname = \"{target}\"")),
            "{}: fuzz/Cargo.toml has no target {target}",
            command.line
        );
    }
}

/// `bash scripts/test` is the command that runs this test: it is not run again from here.
/// A variable set in front of it must be one the script reads.
fn not_run(command: &ReadmeCommand) {
    for (name, value) in &command.env {
        let script = std::fs::read_to_string(repo().join("scripts/test")).unwrap();
        assert!(
            script.contains(&format!("{name}:-}}\" = {value}")),
            "{}: scripts/test does not read {name}={value}",
            command.line
        );
    }
}

fn testkit_command(command: &ReadmeCommand, args: &[&str], shown_output: Option<&str>, readme: &str) {
    assert!(command.env.is_empty(), "{}", command.line);
    let mut process = Command::new(env!("CARGO_BIN_EXE_aml-testkit"));
    process.args(args).current_dir(repo()).env_remove("RUST_LOG");
    let (code, stdout, stderr) =
        output_within(&mut process, command.stdin.as_deref(), Duration::from_secs(120));
    assert_eq!(code, Some(0), "{}: {stderr}", command.line);
    match args {
        ["rehearse"] => {
            let total = stdout
                .lines()
                .find(|l| l.ends_with(" passed, 0 failed"))
                .unwrap_or_else(|| panic!("{}: no passing total in\n{stdout}", command.line));
            assert!(
                readme.contains(&format!("Today: `{total}`")),
                "the README's `Today:` total is not the current {total:?}"
            );
        }
        ["rehearse", report, ..] => {
            let printed: Value = serde_json::from_str(&stdout).unwrap();
            let protocol = printed["protocol"].as_str().unwrap_or_default();
            assert!(protocol.starts_with("aml-"), "{report}: {protocol:?}");
        }
        ["case", _] => {
            let printed: Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(printed["protocol"], "aml-action-boundary-result/1");
            if let Some(shown) = shown_output {
                let shown: Value = serde_json::from_str(shown).unwrap();
                assert_eq!(
                    printed, shown,
                    "the README shows another result for {}",
                    command.line
                );
            }
        }
        ["canonicalize"] => {
            let input = command.stdin.as_deref().expect("canonicalize reads stdin");
            let value = aml_core::strict::parse_str(input.trim_end()).unwrap();
            let canonical = to_canonical_string(&value).unwrap();
            assert_eq!(
                stdout,
                format!("{} {canonical}\n", Sha256Digest::of(canonical.as_bytes()))
            );
        }
        other => panic!("{}: no check for aml-testkit {other:?}", command.line),
    }
}

/// A process a README command starts and leaves running; killed when dropped.
struct Background(std::process::Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An example binary of this build (`target/<profile>/examples/NAME`).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.is_file(),
        "{path:?} is not built (cargo test --workspace builds the examples)"
    );
    path
}

/// The README's gRPC example server, run from a scratch directory (so its receipts file lands
/// there) with the repository's files: up once it prints `{"listening": …}`.
fn grpc_example_server(args: &[&str]) -> Background {
    use std::io::BufRead;
    let scratch = aml_test_support::scratch_dir("readme", "grpc");
    let args: Vec<PathBuf> = args
        .iter()
        .map(|a| match repo().join(a) {
            p if p.is_file() => p,
            _ => PathBuf::from(a),
        })
        .collect();
    let mut child = Command::new(example("tool_server"))
        .args(&args)
        .current_dir(&scratch)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (up, listening) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("\"listening\"") {
                let _ = up.send(());
            }
        }
    });
    let server = Background(child);
    listening
        .recv_timeout(Duration::from_secs(60))
        .expect("the README's gRPC server did not start listening within 60 s");
    server
}

/// Whether every field of `expected` is in `actual` with the same value (objects compared
/// field by field, recursively).
fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => {
            e.iter().all(|(k, v)| a.get(k).is_some_and(|av| contains(av, v)))
        }
        _ => actual == expected,
    }
}

/// The README's Python grpcio calls against the running example server: each prints what the
/// `# {…}` comment after it shows.
fn python_grpc_call(command: &ReadmeCommand, args: &[&str], expected: Option<&Value>) {
    let peers = interop_peers();
    let mut process = Command::new(peers.join("venv/bin/python"));
    process
        .arg(repo().join("scripts/interop/grpc_calls.py"))
        .args(args)
        .current_dir(repo());
    let (code, stdout, stderr) = output_within(&mut process, None, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{}: {stderr}", command.line);
    let printed: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{}: {e}: {stdout}", command.line));
    let expected =
        expected.unwrap_or_else(|| panic!("{}: the README shows no `# {{…}}` output", command.line));
    assert!(
        contains(&printed, expected),
        "{}: printed {printed}, the README shows {expected}",
        command.line
    );
}

/// The A2UI example gate (built with the workspace's tests, under `target/<profile>/examples`):
/// one message in, exactly the response the README shows out.
fn a2ui_example(command: &ReadmeCommand, args: &[&str], shown_output: Option<&str>) {
    let exe = std::env::current_exe().unwrap();
    let examples = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples");
    let mut process = Command::new(examples.join("gate_stdio"));
    process.args(args).current_dir(repo()).env_remove("RUST_LOG");
    let input = command.stdin.as_deref().expect("the README pipes one message in");
    let (code, stdout, stderr) = output_within(&mut process, Some(input), Duration::from_secs(60));
    assert_eq!(code, Some(0), "{}: {stderr}", command.line);
    let shown: Value = serde_json::from_str(shown_output.expect("the README shows the response")).unwrap();
    let lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(
        lines,
        [shown],
        "the README shows another response for {}",
        command.line
    );
}

fn interop_peers() -> PathBuf {
    // Each panics, naming the setup script, when its peer is missing.
    aml_test_support::python();
    aml_test_support::node_bin("mcp-server-filesystem");
    aml_test_support::interop_dir()
}

/// The README's gate command, with the example files, in front of the pinned filesystem
/// server, called by the official Python MCP SDK client.
fn gate_command(command: &ReadmeCommand, args: &[&str]) {
    let split = args
        .iter()
        .position(|a| *a == "--")
        .expect("`--` before the server");
    let (flags, server) = (&args[..split], &args[split + 1..]);
    let ["npx", "-y", package, directory] = server else {
        panic!(
            "{}: expected `npx -y PACKAGE@VERSION DIR` after `--`",
            command.line
        )
    };
    let pinned: Value =
        serde_json::from_str(&std::fs::read_to_string(repo().join("scripts/interop/package.json")).unwrap())
            .unwrap();
    let (name, version) = package.rsplit_once('@').unwrap();
    assert_eq!(name, "@modelcontextprotocol/server-filesystem");
    assert_eq!(
        pinned["dependencies"][name], *version,
        "the README runs another version than scripts/interop/package.json pins"
    );

    let peers = interop_peers();
    let files = repo().join(directory);
    let report = std::fs::read_to_string(files.join("report.txt")).unwrap();
    let status_before = std::fs::read(files.join("status.md")).ok();

    let mut gate = vec![json!(crate::bins::gate())];
    gate.extend(flags.iter().map(|f| json!(f)));
    gate.push(json!("--"));
    gate.push(json!(peers.join("node/node_modules/.bin/mcp-server-filesystem")));
    gate.push(json!(directory));
    let calls = json!([
        {"name": "read_text_file", "arguments": {"path": "report.txt"}},
        {"name": "write_file", "arguments": {"path": "status.md", "content": "written by the agent"}},
        {"name": "write_file", "arguments": {"path": "report.txt", "content": "overwritten"}},
        {"name": "list_allowed_directories", "arguments": {}},
        {"name": "list_directory", "arguments": {"path": "."}},
    ]);
    let mut client = Command::new(peers.join("venv/bin/python"));
    client
        .arg(repo().join("scripts/interop/mcp_client.py"))
        .arg(Value::Array(gate).to_string())
        .arg(calls.to_string())
        .current_dir(repo());
    let (code, stdout, stderr) = output_within(&mut client, None, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{}: python client failed: {stderr}", command.line);
    let result: Value = serde_json::from_str(&stdout).unwrap();
    let verdict = |i: usize| &result["results"][i]["meta"]["aml.action-boundary/verdict"];

    // Allowed read: dispatched to the server, which returned the file.
    assert_eq!(
        verdict(0)["receipt"]["reason"],
        "host_dispatch_returned",
        "{result}"
    );
    assert_eq!(result["results"][0]["text"], report.as_str());
    // Write that needs approval, and this command has no --approve: blocked.
    assert_eq!(
        verdict(1)["receipt"]["reason"],
        "approval_unavailable",
        "{result}"
    );
    assert_eq!(verdict(1)["mcp_result_status"], "not_called");
    // Write to a path no rule names: denied.
    assert_eq!(verdict(2)["receipt"]["reason"], "no_exact_rule", "{result}");
    // A fixed resource: allowed, answered by the server with the served directory.
    assert_eq!(
        verdict(3)["receipt"]["reason"],
        "host_dispatch_returned",
        "{result}"
    );
    let served = files.canonicalize().unwrap();
    assert!(
        result["results"][3]["text"]
            .as_str()
            .unwrap()
            .contains(served.to_str().unwrap()),
        "{result}"
    );
    // A tool tools.json does not register: rejected before any plan.
    assert_eq!(
        verdict(4)["rejection"],
        "invalid_or_unregistered_call",
        "{result}"
    );

    assert_eq!(std::fs::read_to_string(files.join("report.txt")).unwrap(), report);
    assert_eq!(std::fs::read(files.join("status.md")).ok(), status_before);
}

/// The quick start's `gate` directory, in a temporary directory (never in the repository).
struct QuickStart(PathBuf);

impl QuickStart {
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for QuickStart {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
    }
}

/// The pinned server-everything for `npx -y @modelcontextprotocol/server-everything@VERSION`.
fn everything_server(line: &str, server: &[&str]) -> PathBuf {
    let ["npx", "-y", package] = server else {
        panic!("{line}: expected `npx -y PACKAGE@VERSION` after `--`")
    };
    let pinned: Value =
        serde_json::from_str(&std::fs::read_to_string(repo().join("scripts/interop/package.json")).unwrap())
            .unwrap();
    let (name, version) = package.rsplit_once('@').unwrap();
    assert_eq!(name, "@modelcontextprotocol/server-everything");
    assert_eq!(
        pinned["dependencies"][name], *version,
        "the README runs another version than scripts/interop/package.json pins"
    );
    let server = interop_peers().join("node/node_modules/.bin/mcp-server-everything");
    assert!(
        server.is_file(),
        "{server:?} missing: run `bash scripts/interop-setup`"
    );
    server
}

/// `aml-mcp-gate init --out gate -- npx -y …server-everything@VERSION`, run as written (with
/// `gate` in a temporary directory): both files written, every tool pinned, no rules.
fn quick_start_init(command: &ReadmeCommand, args: &[&str]) -> QuickStart {
    let ["--out", "gate", "--", server @ ..] = args else {
        panic!("{}: expected `init --out gate -- SERVER`", command.line)
    };
    let server = everything_server(&command.line, server);
    let root = aml_test_support::scratch_dir("readme", "quick-start");
    let mut process = Command::new(crate::bins::gate());
    process
        .args(["init", "--out", "gate", "--"])
        .arg(&server)
        .current_dir(&root);
    let (code, stdout, stderr) = output_within(&mut process, None, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{}: {stderr}", command.line);
    assert!(stdout.contains("Next:"), "{}: {stdout}", command.line);
    let dir = QuickStart(root.join("gate"));
    let tools: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("tools.json")).unwrap()).unwrap();
    let tools = tools["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "echo"), "{tools:?}");
    assert!(tools
        .iter()
        .all(|t| t["pin"].as_str().unwrap().starts_with("sha256:")));
    let policy: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("policy.json")).unwrap()).unwrap();
    assert_eq!(policy["rules"], json!([]));
    dir
}

/// The README's edit (keep echo with effect read, add the rule it shows), then its gate
/// command, called by the official Python MCP SDK client.
fn quick_start_run(command: &ReadmeCommand, args: &[&str], dir: &std::path::Path) {
    let split = args
        .iter()
        .position(|a| *a == "--")
        .expect("`--` before the server");
    let (flags, server) = (&args[..split], &args[split + 1..]);
    let server = everything_server(&command.line, server);
    let tools: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tools.json")).unwrap()).unwrap();
    let mut echo = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "echo")
        .unwrap()
        .clone();
    echo["effect"] = json!("read");
    std::fs::write(dir.join("tools.json"), json!({"tools": [echo]}).to_string()).unwrap();
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let shown = readme
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("#   {\"tool\": \"echo\""))
        .expect("the README shows the rule to add");
    let rule: Value = serde_json::from_str(&format!("{{\"tool\": \"echo\"{shown}")).unwrap();
    std::fs::write(
        dir.join("policy.json"),
        json!({"protocol": "aml-action-policy/1", "rules": [rule]}).to_string(),
    )
    .unwrap();

    let mut gate = vec![json!(crate::bins::gate())];
    gate.extend(flags.iter().map(|f| json!(f)));
    gate.extend([json!("--state"), json!("memory"), json!("--"), json!(server)]);
    let calls = json!([
        {"name": "echo", "arguments": {"message": "quick start"}},
        {"name": "get-sum", "arguments": {"a": 1, "b": 2}},
    ]);
    let mut client = Command::new(interop_peers().join("venv/bin/python"));
    client
        .arg(repo().join("scripts/interop/mcp_client.py"))
        .arg(Value::Array(gate).to_string())
        .arg(calls.to_string())
        .current_dir(dir.parent().unwrap());
    let (code, stdout, stderr) = output_within(&mut client, None, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{}: python client failed: {stderr}", command.line);
    let result: Value = serde_json::from_str(&stdout).unwrap();
    let verdict = |i: usize| &result["results"][i]["meta"]["aml.action-boundary/verdict"];
    assert_eq!(
        verdict(0)["receipt"]["reason"],
        "host_dispatch_returned",
        "{result}"
    );
    assert_eq!(result["results"][0]["text"], "Echo: quick start");
    assert_eq!(
        verdict(1)["rejection"],
        "invalid_or_unregistered_call",
        "{result}"
    );
}
