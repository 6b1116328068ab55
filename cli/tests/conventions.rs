//! The conventions an operator expects of a command-line tool: `version` (and `--version`),
//! shell completions, man pages, and `job run --arrivals` refusing what it cannot replay.

mod common;

use std::path::Path;
use std::process::Command;

use common::{run, stderr, stdout};

/// The commit this checkout is at, if git can tell.
fn git_head() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn version_names_the_build_in_json_and_in_words() {
    let out = run(&["--json", "version"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
    let commit = info["commit"].as_str().expect("a commit").to_string();
    // Tests run from a checkout: the build script found the commit (the binary may be a
    // commit behind a checkout that moved since it was built, never "unknown").
    if let Some(head) = git_head() {
        assert_eq!(commit.len(), head.len(), "{commit} vs HEAD {head}");
        assert!(commit.chars().all(|c| c.is_ascii_hexdigit()), "{commit}");
    }
    let target = info["target"].as_str().expect("a target");
    assert!(target.contains(std::env::consts::ARCH), "{target}");
    assert!(
        ["debug", "release"].contains(&info["profile"].as_str().expect("a profile")),
        "{info}"
    );
    let features: Vec<&str> = info["features"]
        .as_array()
        .expect("features")
        .iter()
        .filter_map(serde_json::Value::as_str)
        .collect();
    assert!(
        features.contains(&"fullerene-master/rocksdb-storage"),
        "{features:?}"
    );

    let words = run(&["version"]);
    assert!(words.status.success());
    assert!(
        stdout(&words).contains(&format!("commit:   {commit}")),
        "{}",
        stdout(&words)
    );
    let flag = run(&["--version"]);
    assert!(flag.status.success());
    let line = stdout(&flag);
    assert!(
        line.starts_with(&format!(
            "fullerene {} (commit {commit}",
            env!("CARGO_PKG_VERSION")
        )),
        "{line}"
    );
}

#[test]
fn completion_scripts_cover_every_shell_and_the_subcommands() {
    let bash = run(&["completions", "bash"]);
    assert!(bash.status.success(), "{}", stderr(&bash));
    let script = stdout(&bash);
    assert!(
        script.contains("complete -F"),
        "not a bash completion script"
    );
    for sub in ["master", "agent", "job", "version", "completions", "man"] {
        assert!(script.contains(sub), "the bash script lacks {sub}");
    }
    // Flags of a nested subcommand are completed too.
    assert!(
        script.contains("--arrivals"),
        "the bash script lacks job run's flags"
    );
    for (shell, marker) in [
        ("zsh", "#compdef fullerene"),
        ("fish", "complete -c fullerene"),
        ("elvish", "fullerene"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let out = run(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        assert!(
            stdout(&out).contains(marker),
            "{shell} script lacks {marker}"
        );
    }
    let unknown = run(&["completions", "tcsh"]);
    assert!(!unknown.status.success());
    assert!(stderr(&unknown).contains("tcsh"), "{}", stderr(&unknown));
}

#[test]
fn man_writes_a_page_per_command_that_man_reads() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out_dir = dir.path().join("man1");
    let out = run(&["man", "--out", out_dir.to_str().expect("UTF-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    for (page, title) in [
        ("fullerene.1", "fullerene"),
        ("fullerene-master.1", "fullerene-master"),
        ("fullerene-job-run.1", "fullerene-job-run"),
        ("fullerene-certs-init.1", "fullerene-certs-init"),
    ] {
        let path = out_dir.join(page);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} not written: {e}", path.display()));
        let header = text
            .lines()
            .find(|line| line.starts_with(".TH"))
            .unwrap_or_else(|| panic!("{page} has no .TH header"));
        assert!(
            header.starts_with(&format!(".TH {title} 1 ")),
            "{page}: {header}"
        );
        assert!(text.contains(".SH NAME"), "{page} lacks NAME");
    }
    let top = std::fs::read_to_string(out_dir.join("fullerene.1")).expect("fullerene.1");
    assert!(
        top.contains("fullerene\\-master(1)"),
        "the top page lists the subcommands"
    );
    let pages = std::fs::read_dir(&out_dir).expect("the pages").count();
    assert!(pages > 30, "only {pages} pages");

    // `man -l` renders a page when man (with groff) is installed; otherwise say so.
    if let Some(rendered) = render_with_man(&out_dir.join("fullerene-job-run.1")) {
        assert!(rendered.contains("--arrivals"), "{rendered}");
    } else {
        eprintln!("man is not installed: the pages were checked as files only");
    }
}

/// The page rendered by `man -l`, if man runs here.
fn render_with_man(page: &Path) -> Option<String> {
    let out = Command::new("man")
        .arg("-l")
        .arg(page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).replace(['\u{2010}', '\u{2212}'], "-"))
}

#[test]
fn job_run_refuses_arrivals_it_cannot_replay() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("jobs.jsonl");
    // A job without `arrival_s`: `trace` has nothing to replay.
    std::fs::write(
        &file,
        r#"{"name":"a","group":"g","stages":[{"id":0,"name":"s","parents":[],"tasks":1,"duration_s":1.0,"demand":{"cpus":1,"mem_mib":100}}]}
"#,
    )
    .expect("write the workload");
    let file = file.to_str().expect("UTF-8");
    let masters = ["--master-addrs", "127.0.0.1:9"];
    let out = run(&[
        &["job", "run", "--workload", file, "--arrivals", "trace"],
        &masters[..],
    ]
    .concat());
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--arrivals trace")
            && stderr(&out).contains("job `a` has no arrival_s"),
        "{}",
        stderr(&out)
    );
    let out = run(&[
        &["job", "run", "--workload", file, "--arrivals", "poisson:-3"],
        &masters[..],
    ]
    .concat());
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--arrivals"), "{}", stderr(&out));
    let state_dir = dir.path().join("state");
    let state_dir = state_dir.to_str().expect("UTF-8");
    let out = run(&[
        &["job", "run", "--workload", file, "--arrivals", "poisson:5"],
        &masters[..],
        &["--state-dir", state_dir],
    ]
    .concat());
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--state-dir"), "{}", stderr(&out));
}
