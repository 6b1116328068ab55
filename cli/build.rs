//! Embeds what `fullerene version` reports about the build: the git commit (from `git rev-parse`
//! when the source is a checkout, else `FULLERENE_COMMIT`, else "unknown": a build without git,
//! from a source tarball say, never fails), the target triple, the profile, and this crate's
//! enabled features.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=FULLERENE_COMMIT");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let commit = git(&manifest_dir, &["rev-parse", "--short=12", "HEAD"])
        .inspect(|_| rerun_when_head_moves(&manifest_dir))
        .or_else(|| {
            std::env::var("FULLERENE_COMMIT")
                .ok()
                .filter(|c| !c.is_empty())
        })
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=FULLERENE_COMMIT={commit}");
    for (key, name) in [
        ("TARGET", "FULLERENE_TARGET"),
        ("PROFILE", "FULLERENE_PROFILE"),
    ] {
        let value = std::env::var(key).unwrap_or_else(|_| "unknown".to_string());
        println!("cargo:rustc-env={name}={value}");
    }
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(key, _)| key.strip_prefix("CARGO_FEATURE_").map(str::to_string))
        .map(|name| name.to_lowercase().replace('_', "-"))
        .collect();
    features.sort();
    println!("cargo:rustc-env=FULLERENE_FEATURES={}", features.join(","));
}

/// `git ARGS` run in `dir`, its trimmed output if it succeeded.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (output.status.success() && !text.is_empty()).then(|| text.to_string())
}

/// Asks cargo to run this script again when a commit or a checkout moves HEAD (in a worktree
/// too: git names the files). Only files that exist are named: a missing one would make cargo
/// run the script on every build.
fn rerun_when_head_moves(dir: &Path) {
    let mut paths = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        paths.push(branch);
    }
    for path in paths {
        if let Some(file) = git(dir, &["rev-parse", "--git-path", &path]) {
            let file = dir.join(file);
            if file.exists() {
                println!("cargo:rerun-if-changed={}", file.display());
            }
        }
    }
}
