//! Config files.
//!
//! A config file is TOML with one table per subcommand path, whose keys are the subcommand's long
//! flag names:
//!
//! ```toml
//! [sim]
//! machines = 5
//! arrivals = "poisson:25"
//! compare = ["graphene+carbyne", "drf"]
//!
//! [certs.init]
//! dir = "/etc/fullerene/certs"
//! ```
//!
//! Precedence, highest first: command-line flags, environment variables, the config file, the
//! built-in defaults. A key the subcommand does not have is an error naming the key and the
//! table, so a typo is not silently ignored.

use std::ffi::OsString;
use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::parser::ValueSource;
use clap::{ArgMatches, Command};

/// Returns `args` with the config file's values for the invoked subcommand inserted as flags,
/// for every flag that was not given on the command line or by environment variable.
pub(crate) fn apply_config_file(
    command: &Command,
    args: Vec<OsString>,
    path: &Path,
) -> Result<Vec<OsString>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .with_context(|| format!("config file {} is not valid TOML", path.display()))?;

    // Required flags may be among those the file provides: find the subcommand and the flags
    // given without enforcing anything yet (the real parse comes after).
    let matches = command
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(args.iter().cloned())
        .map_err(|e| anyhow::anyhow!(e.to_string()))?;

    // Walk down the invoked subcommands, remembering where each one's name is in `args`.
    let mut path_names: Vec<String> = Vec::new();
    let mut cmd = command.clone();
    let mut m: &ArgMatches = &matches;
    while let Some((name, sub_m)) = m.subcommand() {
        path_names.push(name.to_string());
        cmd = cmd
            .find_subcommand(name)
            .cloned()
            .with_context(|| format!("unknown subcommand {name}"))?;
        m = sub_m;
    }
    if path_names.is_empty() {
        return Ok(args);
    }
    let mut section: Option<&toml::Table> = Some(&table);
    for name in &path_names {
        section = section.and_then(|t| t.get(name)).and_then(|v| v.as_table());
    }
    let Some(section) = section else {
        return Ok(args);
    };

    let mut injected: Vec<OsString> = Vec::new();
    let table_name = path_names.join(".");
    for (key, value) in section {
        if value.is_table() {
            continue; // a nested subcommand's table
        }
        let flag = key.replace('_', "-");
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(flag.as_str()))
            .with_context(|| {
                format!(
                    "config file {}: [{table_name}] has unknown key `{key}`",
                    path.display()
                )
            })?;
        let id = arg.get_id().as_str();
        if let Some(ValueSource::CommandLine | ValueSource::EnvVariable) = m.value_source(id) {
            continue;
        }
        let takes_value = arg.get_action().takes_values();
        match value {
            toml::Value::Boolean(b) if !takes_value => {
                if *b {
                    injected.push(format!("--{flag}").into());
                }
            }
            other => {
                let text = scalar_to_string(other).with_context(|| {
                    format!(
                        "config file {}: [{table_name}] key `{key}` must be a string, number, boolean or array of them",
                        path.display()
                    )
                })?;
                injected.push(format!("--{flag}={text}").into());
            }
        }
    }
    if injected.is_empty() {
        return Ok(args);
    }
    // Insert right after the innermost subcommand's name.
    let innermost = path_names.last().cloned().unwrap_or_default();
    let position = args
        .iter()
        .rposition(|a| a.to_str() == Some(innermost.as_str()))
        .map(|p| p + 1)
        .unwrap_or(args.len());
    let mut out = args;
    out.splice(position..position, injected);
    Ok(out)
}

/// A TOML value as the flag's text: arrays comma-separated.
pub(crate) fn scalar_to_string(value: &toml::Value) -> Result<String> {
    Ok(match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Array(items) => items
            .iter()
            .map(scalar_to_string)
            .collect::<Result<Vec<_>>>()?
            .join(","),
        _ => bail!("unsupported value"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction};

    fn cli() -> Command {
        Command::new("fullerene").subcommand(
            Command::new("sim")
                .arg(Arg::new("machines").long("machines").default_value("4"))
                .arg(
                    Arg::new("seed")
                        .long("seed")
                        .env("TEST_FULLERENE_SEED")
                        .default_value("1"),
                )
                .arg(Arg::new("compare").long("compare"))
                .arg(
                    Arg::new("verbose")
                        .long("verbose")
                        .action(ArgAction::SetTrue),
                ),
        )
    }

    fn write(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn file_fills_what_flags_do_not_give() {
        let f = write("[sim]\nmachines = 9\ncompare = [\"a\", \"b\"]\nverbose = true\n");
        let out = apply_config_file(&cli(), args(&["fullerene", "sim"]), f.path()).unwrap();
        let m = cli().get_matches_from(out);
        let (_, sim) = m.subcommand().unwrap();
        assert_eq!(sim.get_one::<String>("machines").unwrap(), "9");
        assert_eq!(sim.get_one::<String>("compare").unwrap(), "a,b");
        assert!(sim.get_flag("verbose"));
    }

    #[test]
    fn flags_beat_the_file() {
        let f = write("[sim]\nmachines = 9\n");
        let out = apply_config_file(
            &cli(),
            args(&["fullerene", "sim", "--machines", "3"]),
            f.path(),
        )
        .unwrap();
        let m = cli().get_matches_from(out);
        assert_eq!(
            m.subcommand()
                .unwrap()
                .1
                .get_one::<String>("machines")
                .unwrap(),
            "3"
        );
    }

    #[test]
    fn unknown_keys_and_bad_toml_are_named() {
        let f = write("[sim]\nmachine = 9\n");
        let err = apply_config_file(&cli(), args(&["fullerene", "sim"]), f.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown key `machine`"), "{err}");
        let f = write("[sim\n");
        let err = apply_config_file(&cli(), args(&["fullerene", "sim"]), f.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("not valid TOML"), "{err}");
    }
}
