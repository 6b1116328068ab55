//! `fullerene completions SHELL` and `fullerene man --out DIR`: shell completion scripts and
//! man pages generated from the same clap definition the binary parses with, so they cannot
//! drift from the flags.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Command};
use clap_complete::Shell;

/// Flags of `fullerene completions`.
#[derive(Args, Debug)]
pub(crate) struct CompletionsArgs {
    /// The shell to write a completion script for: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: Shell,
}

/// Flags of `fullerene man`.
#[derive(Args, Debug)]
pub(crate) struct ManArgs {
    /// Directory to write the pages to (created if missing): `fullerene.1`, and one
    /// `fullerene-SUBCOMMAND.1` per subcommand, e.g. `fullerene-job-run.1`.
    #[arg(long, value_name = "PATH")]
    pub out: PathBuf,
}

/// Writes the completion script for `args.shell` to standard output.
pub(crate) fn completions(args: &CompletionsArgs, mut command: Command) -> Result<()> {
    let name = command.get_name().to_string();
    // Into a buffer first: clap_complete panics on a write error, and a reader that stops
    // early (`| head`) is not one.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, name, &mut script);
    match std::io::stdout().write_all(&script) {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(error).context("cannot write the completion script")
        }
        _ => Ok(()),
    }
}

/// Writes a man page per command and subcommand to `args.out`.
pub(crate) fn man(args: &ManArgs, command: Command) -> Result<()> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    clap_mangen::generate_to(command, &args.out)
        .with_context(|| format!("cannot write the man pages to {}", args.out.display()))?;
    eprintln!("wrote the man pages to {}", args.out.display());
    Ok(())
}
