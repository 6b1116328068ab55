//! The naming scheme of flags, environment variables and units, checked over every command.
//!
//! README's "Flags, environment variables and units" states these rules for users; this module
//! is their one executable copy, walked over the whole command tree, so a new flag that breaks
//! one fails the tests and names itself:
//!
//! 1. One name, one meaning: a long flag takes the same kind of value (the same value name) in
//!    every command, an environment variable stands for one flag, and a short flag is the same
//!    long flag everywhere.
//! 2. Quantities carry their unit as the last word of the name, and the value name is that unit:
//!    `-ms` (`MS`), `-secs` (`SECS`), `-days` (`DAYS`), `-bytes` (`BYTES`), `-percent`
//!    (`PERCENT`), `-entries` (`N`). A flag about time (a timeout, an interval, a retention...)
//!    always has one, or takes a span written with its unit (`30s`, `5m`, value name `SPAN`).
//!    A ratio (`FRACTION`, `FACTOR`) has no unit whatever its name mentions: `sim --deadlines
//!    FRACTION` is the fraction of jobs given a deadline.
//! 3. A plural noun alone (`--agents`, `--jobs`, `--masters`) is a count (`N`); addresses are
//!    `ADDR` to bind (`--listen`, `--http-listen`) or `HOST:PORT,...` to reach (`--master-addrs`); paths are `FILE` or
//!    `DIR`; resource vectors are `--...resources KIND=AMOUNT,...`.
//! 4. Environment variables are `FULLERENE_`, then the name of the command the setting belongs
//!    to, then the flag in upper snake case: `--http-listen` of `master` is
//!    `FULLERENE_MASTER_HTTP_LISTEN`. A flag that several commands share drops the command where
//!    it means the same for all (`--master-addrs` is `FULLERENE_MASTER_ADDRS` everywhere).
//!    `--log-level` reads `FULLERENE_LOG`, the one exception (named like `RUST_LOG`).
//! 5. Value names are written for the reader, never clap's default for a multi-word flag
//!    (`AGENT_HEARTBEAT_MS`); a one-word name (`POLICY`, `SEED`) reads well as it is.

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use clap::{Arg, Command, CommandFactory};

    use crate::Cli;

    /// Every argument with a long name, with the path of the command it belongs to
    /// (`["job", "run"]`); global arguments once, at the top.
    fn every_flag() -> Vec<(Vec<String>, Arg)> {
        fn walk(command: &Command, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, Arg)>) {
            for arg in command.get_arguments() {
                let inherited = arg.is_global_set() && !path.is_empty();
                if arg.get_long().is_some() && !inherited {
                    out.push((path.clone(), arg.clone()));
                }
            }
            for sub in command.get_subcommands() {
                path.push(sub.get_name().to_string());
                walk(sub, path, out);
                path.pop();
            }
        }
        let mut command = Cli::command();
        command.build();
        let mut out = Vec::new();
        walk(&command, &mut Vec::new(), &mut out);
        out
    }

    fn long(arg: &Arg) -> &str {
        arg.get_long().unwrap_or_default()
    }

    fn upper_snake(text: &str) -> String {
        text.replace('-', "_").to_uppercase()
    }

    fn value_name(arg: &Arg) -> Option<String> {
        if !arg.get_action().takes_values() {
            return None;
        }
        Some(
            arg.get_value_names()
                .map(|names| {
                    names
                        .iter()
                        .map(clap::builder::Str::as_str)
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_else(|| upper_snake(long(arg))),
        )
    }

    fn env(arg: &Arg) -> Option<String> {
        arg.get_env().map(|env| env.to_string_lossy().into_owned())
    }

    fn place(path: &[String], arg: &Arg) -> String {
        format!("`fullerene {} --{}`", path.join(" "), long(arg))
    }

    /// The flags clap adds itself.
    fn ours(arg: &Arg) -> bool {
        !matches!(long(arg), "help" | "version")
    }

    #[test]
    fn a_long_flag_takes_the_same_kind_of_value_in_every_command() {
        let mut seen: BTreeMap<String, (Option<String>, String)> = BTreeMap::new();
        let mut broken = Vec::new();
        for (path, arg) in every_flag().iter().filter(|(_, arg)| ours(arg)) {
            let here = value_name(arg);
            match seen.get(long(arg)) {
                Some((first, where_first)) if *first != here => broken.push(format!(
                    "{} takes {here:?} but {where_first} takes {first:?}",
                    place(path, arg)
                )),
                Some(_) => {}
                None => {
                    seen.insert(long(arg).to_string(), (here, place(path, arg)));
                }
            }
        }
        assert!(broken.is_empty(), "{}", broken.join("\n"));
    }

    #[test]
    fn a_short_flag_and_an_environment_variable_stand_for_one_long_flag() {
        let mut shorts: BTreeMap<char, String> = BTreeMap::new();
        let mut envs: BTreeMap<String, String> = BTreeMap::new();
        let mut broken = Vec::new();
        for (path, arg) in every_flag().iter().filter(|(_, arg)| ours(arg)) {
            if let Some(short) = arg.get_short() {
                let first = shorts.entry(short).or_insert_with(|| long(arg).to_string());
                if first != long(arg) {
                    broken.push(format!("-{short} is {} and --{first}", place(path, arg)));
                }
            }
            if let Some(name) = env(arg) {
                let first = envs
                    .entry(name.clone())
                    .or_insert_with(|| long(arg).to_string());
                if first != long(arg) {
                    broken.push(format!("{name} is {} and --{first}", place(path, arg)));
                }
            }
        }
        assert!(broken.is_empty(), "{}", broken.join("\n"));
    }

    /// The unit suffixes of rule 2 and the value name each implies.
    const UNITS: [(&str, &str); 7] = [
        ("-ms", "MS"),
        ("-secs", "SECS"),
        ("-days", "DAYS"),
        ("-bytes", "BYTES"),
        ("-percent", "PERCENT"),
        ("-entries", "N"),
        ("-ticks", "N"),
    ];

    /// Words that make a flag a quantity of time, which then needs a unit.
    const TIME_WORDS: [&str; 12] = [
        "interval",
        "timeout",
        "duration",
        "retention",
        "settle",
        "ttl",
        "heartbeat",
        "backoff",
        "retry",
        "keep-alive",
        "deadline",
        "window",
    ];

    #[test]
    fn quantities_carry_their_unit_in_the_name_and_the_value_name() {
        let mut broken = Vec::new();
        for (path, arg) in every_flag().iter().filter(|(_, arg)| ours(arg)) {
            let name = long(arg);
            let Some(value) = value_name(arg) else {
                continue;
            };
            let unit = UNITS.iter().find(|(suffix, _)| name.ends_with(suffix));
            if let Some((suffix, expected)) = unit {
                if value != *expected {
                    broken.push(format!(
                        "{}: a `{suffix}` value is {expected}, not {value}",
                        place(path, arg)
                    ));
                }
            } else if TIME_WORDS.iter().any(|word| name.contains(word))
                && !matches!(value.as_str(), "SPAN" | "FRACTION" | "FACTOR")
            {
                broken.push(format!(
                    "{}: a time needs a unit suffix ({}) or a SPAN value",
                    place(path, arg),
                    UNITS.map(|(suffix, _)| suffix).join(", ")
                ));
            }
        }
        assert!(broken.is_empty(), "{}", broken.join("\n"));
    }

    #[test]
    fn counts_addresses_and_resource_vectors_are_named_by_rule() {
        let mut broken = Vec::new();
        for (path, arg) in every_flag().iter().filter(|(_, arg)| ours(arg)) {
            let name = long(arg);
            let Some(value) = value_name(arg) else {
                continue;
            };
            let address = value.contains("ADDR") || value.contains("HOST:PORT");
            let address_name = name.ends_with("-addrs")
                || name.ends_with("listen")
                || name == "addr"
                || name == "peers";
            if address != address_name {
                broken.push(format!(
                    "{}: addresses, and only they, are `--...-addrs`, `--...listen`, `--addr` or `--peers` (here {value})",
                    place(path, arg)
                ));
            }
            if name.ends_with("-addrs") && value != "HOST:PORT,..." {
                broken.push(format!(
                    "{}: `-addrs` takes HOST:PORT,..., not {value}",
                    place(path, arg)
                ));
            }
            let resources = name.ends_with("resources");
            if resources != (value == "KIND=AMOUNT,...") {
                broken.push(format!(
                    "{}: resource vectors, and only they, are `--...resources KIND=AMOUNT,...` (here {value})",
                    place(path, arg)
                ));
            }
            if value.contains('_') {
                broken.push(format!(
                    "{}: name the value for the reader (not clap's {value})",
                    place(path, arg)
                ));
            }
        }
        assert!(broken.is_empty(), "{}", broken.join("\n"));
    }

    #[test]
    fn environment_variables_are_named_after_their_command_and_flag() {
        let flags = every_flag();
        // The top-level commands each long flag appears in (globals: in all of them).
        let mut commands_of: BTreeMap<&str, std::collections::BTreeSet<&str>> = BTreeMap::new();
        for (path, arg) in &flags {
            let command = path.first().map_or("*", String::as_str);
            commands_of.entry(long(arg)).or_default().insert(command);
        }
        let mut broken = Vec::new();
        for (path, arg) in flags.iter().filter(|(_, arg)| ours(arg)) {
            let Some(name) = env(arg) else { continue };
            if long(arg) == "log-level" {
                assert_eq!(name, "FULLERENE_LOG");
                continue;
            }
            let flag = upper_snake(long(arg));
            let Some(rest) = name.strip_prefix("FULLERENE_") else {
                broken.push(format!(
                    "{}: {name} lacks the FULLERENE_ prefix",
                    place(path, arg)
                ));
                continue;
            };
            let owner = rest
                .strip_suffix(flag.as_str())
                .map(|o| o.trim_end_matches('_'));
            let command = path.first().map_or(String::new(), |c| upper_snake(c));
            let shared = commands_of[long(arg)].len() > 1 || path.is_empty();
            match owner {
                Some("") if shared => {}
                Some(owner) if owner == command => {}
                _ => broken.push(format!(
                    "{}: {name} is not FULLERENE_{command}_{flag}{}",
                    place(path, arg),
                    if shared {
                        format!(" or FULLERENE_{flag}")
                    } else {
                        String::new()
                    }
                )),
            }
        }
        assert!(broken.is_empty(), "{}", broken.join("\n"));
    }

    /// The checks above see every command: a sample of flags from deep in the tree is there.
    #[test]
    fn the_walk_reaches_every_level_of_the_command_tree() {
        let flags = every_flag();
        let has = |path: &[&str], name: &str| {
            flags.iter().any(|(p, arg)| {
                p.iter().map(String::as_str).eq(path.iter().copied()) && long(arg) == name
            })
        };
        assert!(has(&[], "log-level"));
        assert!(has(&["job", "run"], "workload"));
        assert!(has(&["agent"], "work-dir"));
        assert!(has(&["agent", "drain"], "deadline"));
        assert!(
            !has(&["agent", "drain"], "log-level"),
            "globals are checked once"
        );
    }
}
