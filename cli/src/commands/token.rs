//! `fullerene token`: bearer tokens for the masters' HTTP API.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use fullerene_master::server::http::auth::{
    generate_token, parse_time, token_line, Scope, TokenSet,
};
use fullerene_transport::certs::write_file;
use serde::Serialize;

use crate::output::JsonOutput;

/// Token commands.
#[derive(Subcommand, Debug)]
pub(crate) enum TokenCommand {
    /// Make a new token: 256 random bits, printed once on standard output; its hash (never
    /// the token) goes into the token file the masters read with `--http-tokens`, which they
    /// reload by themselves within seconds (or on SIGHUP).
    ///
    /// Example: `fullerene token new --name grafana --scope read --valid-days 90
    /// --http-tokens /etc/fullerene/http-tokens`, then `curl --cacert ca.pem -H "Authorization: Bearer
    /// $TOKEN" https://master-1:8081/state`.
    New(TokenNewArgs),
}

/// Flags of `fullerene token new`.
#[derive(Args, Debug)]
pub(crate) struct TokenNewArgs {
    /// The token's name, shown in the masters' audit log (1 to 64 letters, digits, `-`, `_`,
    /// `.`; unique in the file).
    #[arg(long)]
    name: String,
    /// `read` (every GET) or `write` (reads and the writes that change state).
    #[arg(long)]
    scope: Scope,
    /// When the token stops working, RFC 3339 (`2026-12-31T00:00:00Z`).
    #[arg(long, value_name = "TIME", conflicts_with = "valid_days", value_parser = parse_time)]
    expires: Option<i64>,
    /// How many days from now the token works.
    #[arg(long, value_name = "DAYS", value_parser = clap::value_parser!(u64).range(1..=36_500))]
    valid_days: Option<u64>,
    /// Add the token to this file (created, readable by its owner only, if missing); without
    /// it, the line to add is printed on standard error.
    #[arg(long, env = "FULLERENE_HTTP_TOKENS", value_name = "FILE")]
    http_tokens: Option<PathBuf>,
}

#[derive(Serialize)]
struct NewToken {
    name: String,
    scope: String,
    token: String,
    line: String,
    file: Option<PathBuf>,
}

/// Runs a `token` subcommand.
pub(crate) fn run(command: TokenCommand, json: &JsonOutput) -> Result<()> {
    match command {
        TokenCommand::New(args) => new(args, json),
    }
}

fn new(args: TokenNewArgs, json: &JsonOutput) -> Result<()> {
    let expires = match (args.expires, args.valid_days) {
        (Some(at), _) => Some(at),
        (None, Some(days)) => {
            let until = SystemTime::now() + Duration::from_secs(days * 86_400);
            let seconds = until
                .duration_since(SystemTime::UNIX_EPOCH)
                .context("the clock is before 1970")?
                .as_secs();
            Some(i64::try_from(seconds)?)
        }
        (None, None) => None,
    };
    let token =
        generate_token().map_err(|_| anyhow!("the system has no random numbers to give"))?;
    let line = token_line(&args.name, args.scope, &token, expires).map_err(|e| anyhow!(e))?;
    if let Some(file) = &args.http_tokens {
        add_line(file, &line)?;
    }
    let made = NewToken {
        name: args.name.clone(),
        scope: args.scope.to_string(),
        token,
        line,
        file: args.http_tokens.clone(),
    };
    json.emit(&made, || {
        match &made.file {
            Some(file) => eprintln!(
                "token `{}` ({}) added to {}; it is shown once, keep it now:",
                made.name,
                made.scope,
                file.display()
            ),
            None => eprintln!(
                "add this line to the masters' token file (--http-tokens):\n{}\nthe token (shown once):",
                made.line
            ),
        }
        made.token.clone()
    })
}

/// Adds `line` to the token file at `path`, refusing what the masters would refuse (a name
/// or token used twice, a broken file), and replacing the file at once so that a master never
/// reads half of it.
fn add_line(path: &Path, line: &str) -> Result<()> {
    let existing = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(error).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut text = existing;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
    text.push('\n');
    if let Err(error) = TokenSet::parse(&text) {
        bail!(
            "{} would not be a valid token file: {error}",
            path.display()
        );
    }
    write_file(path, text.as_bytes(), true)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_added_to_a_file_the_masters_accept_and_duplicates_refused() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("tokens");
        let first = generate_token().expect("a token");
        add_line(
            &path,
            &token_line("one", Scope::Read, &first, None).expect("a line"),
        )
        .expect("added");
        let second = generate_token().expect("a token");
        add_line(
            &path,
            &token_line("two", Scope::Write, &second, None).expect("a line"),
        )
        .expect("added");
        let tokens =
            TokenSet::parse(&std::fs::read_to_string(&path).expect("read")).expect("a token file");
        assert_eq!(tokens.len(), 2);
        assert!(tokens.verify(&second, 0).is_ok());
        let again = token_line("one", Scope::Write, &second, None).expect("a line");
        let error = add_line(&path, &again).expect_err("a name used twice");
        assert!(error.to_string().contains("used twice"), "{error}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path)
                .expect("metadata")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
