//! The command template of the DAG-job framework ([`ExecutorTemplate::Command`]).
//!
//! A task runs as `sh -c SCRIPT`, where SCRIPT is the template with its placeholders replaced.
//! Job and stage names come from workload files, which anyone may write, so a name must never
//! become shell syntax: every text value is substituted single-quoted (`'it'\''s'`), numbers
//! bare, and the template is read once from left to right, so a value that itself looks like a
//! placeholder (a job named `{stage}`) is never expanded again.
//!
//! [`ExecutorTemplate::Command`]: super::ExecutorTemplate::Command

/// Where a text placeholder stands that its quoting cannot protect.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// Inside double quotes, where the single quotes of the substituted value are plain
    /// characters and `$(...)` in it would run.
    #[error("command template: `{{{name}}}` at byte {at} is inside double quotes, where a name's quoting does not hold; write {{{name}}} without quotes (it is substituted as one quoted word)")]
    InDoubleQuotes {
        /// The placeholder's name.
        name: String,
        /// Its byte offset in the template.
        at: usize,
    },
    /// Right after `$`, where the shell would read the quoted value as `$'...'`.
    #[error("command template: `{{{name}}}` at byte {at} follows `$`, which would make its quoted value `$'...'`; remove the `$`")]
    AfterDollar {
        /// The placeholder's name.
        name: String,
        /// Its byte offset in the template.
        at: usize,
    },
}

/// Checks that every text placeholder (those `is_text` names) stands where its single quotes
/// hold: not inside double quotes, not right after `$`. Inside single quotes is fine (the value
/// closes them, stands quoted, and reopens them). Numbers may stand anywhere.
pub fn check(template: &str, is_text: impl Fn(&str) -> bool) -> Result<(), TemplateError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Quote {
        None,
        Single,
        Double,
    }
    let mut quote = Quote::None;
    let mut escaped = false;
    let mut previous = None;
    for (at, c) in template.char_indices() {
        if escaped {
            escaped = false;
        } else {
            match (quote, c) {
                (Quote::Single, '\'') => quote = Quote::None,
                (Quote::Single, _) => {}
                (_, '\\') => escaped = true,
                (Quote::None, '\'') => quote = Quote::Single,
                (Quote::None, '"') => quote = Quote::Double,
                (Quote::Double, '"') => quote = Quote::None,
                (_, '{') => {
                    let name = template[at + 1..]
                        .find('}')
                        .map(|close| &template[at + 1..at + 1 + close]);
                    if let Some(name) = name.filter(|name| is_text(name)) {
                        let name = name.to_string();
                        if quote == Quote::Double {
                            return Err(TemplateError::InDoubleQuotes { name, at });
                        }
                        if previous == Some('$') {
                            return Err(TemplateError::AfterDollar { name, at });
                        }
                    }
                }
                _ => {}
            }
        }
        previous = Some(c);
    }
    Ok(())
}

/// A value substituted for a placeholder.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Free text (a job or stage name): substituted as one shell word, quoted.
    Text(String),
    /// A number: substituted as it is written.
    Number(String),
}

/// `text` as one POSIX shell word: single-quoted, each `'` written as `'\''`.
///
/// ```
/// use fullerene_sdk::dag::template::shell_quote;
///
/// assert_eq!(shell_quote("q1"), "'q1'");
/// assert_eq!(shell_quote("it's $(rm -rf /)"), r"'it'\''s $(rm -rf /)'");
/// ```
pub fn shell_quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('\'');
    for c in text.chars() {
        if c == '\'' {
            quoted.push_str("'\\''");
        } else {
            quoted.push(c);
        }
    }
    quoted.push('\'');
    quoted
}

/// The template with each `{name}` that `value_of` knows replaced by its value (text quoted);
/// anything else, `${HOME}` included, is left as written.
pub fn expand(template: &str, value_of: impl Fn(&str) -> Option<Value>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let known = after
            .find('}')
            .and_then(|close| value_of(&after[..close]).map(|value| (close, value)));
        match known {
            Some((close, Value::Text(text))) => {
                out.push_str(&shell_quote(&text));
                rest = &after[close + 1..];
            }
            Some((close, Value::Number(number))) => {
                out.push_str(&number);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(name: &str) -> Option<Value> {
        match name {
            "job" => Some(Value::Text("q1".into())),
            "index" => Some(Value::Number("3".into())),
            _ => None,
        }
    }

    #[test]
    fn known_placeholders_are_replaced_and_the_rest_kept() {
        assert_eq!(
            expand("run {job} {index} ${HOME} {unknown} {", values),
            "run 'q1' 3 ${HOME} {unknown} {"
        );
        assert_eq!(expand("{index}{index}", values), "33");
        assert_eq!(expand("", values), "");
    }

    #[test]
    fn text_placeholders_where_quoting_cannot_hold_are_refused() {
        let is_text = |name: &str| name == "job";
        for fine in [
            "run {job} {index}",
            "run '{job}' \"{index}\"",
            "run \"$HOME\" {job} '\"' {job}",
            "echo \\\"{job}",
            "${HOME} {job}",
        ] {
            assert_eq!(check(fine, is_text), Ok(()), "{fine}");
        }
        assert_eq!(
            check("echo \"{job}\"", is_text),
            Err(TemplateError::InDoubleQuotes {
                name: "job".into(),
                at: 6
            })
        );
        assert_eq!(
            check("echo ${job}", is_text),
            Err(TemplateError::AfterDollar {
                name: "job".into(),
                at: 6
            })
        );
        // Numbers may stand anywhere.
        assert_eq!(check("echo \"{index}\" ${index}", is_text), Ok(()));
        let error = check("echo \"{job}\"", is_text).expect_err("refused");
        assert!(error.to_string().contains("double quotes"), "{error}");
    }

    #[test]
    fn a_value_that_looks_like_a_placeholder_is_not_expanded_again() {
        let sneaky = |name: &str| match name {
            "job" => Some(Value::Text("{index}".into())),
            other => values(other),
        };
        assert_eq!(expand("{job} {index}", sneaky), "'{index}' 3");
    }

    /// Names full of quotes, spaces, `$(...)`, backquotes and newlines reach the task as
    /// exactly those bytes, through a real `sh -c`, and run nothing.
    #[test]
    fn hostile_names_reach_the_shell_as_plain_words() {
        let dir = tempfile::tempdir().expect("tempdir");
        let canary = dir.path().join("ran");
        let names = [
            format!("$(touch {})", canary.display()),
            format!("`touch {}`", canary.display()),
            format!("x'; touch {}; echo '", canary.display()),
            "two  spaces and \"double\" quotes".to_string(),
            "new\nline; * ? [a] ~ & | > <".to_string(),
            "it's".to_string(),
            String::new(),
        ];
        for name in &names {
            let script = expand(
                "printf '%s|' {job} {index}",
                |placeholder| match placeholder {
                    "job" => Some(Value::Text(name.clone())),
                    other => values(other),
                },
            );
            let output = std::process::Command::new("sh")
                .arg("-c")
                .arg(&script)
                .current_dir(dir.path())
                .output()
                .expect("run sh");
            assert!(output.status.success(), "{script}: {output:?}");
            assert_eq!(
                String::from_utf8_lossy(&output.stdout),
                format!("{name}|3|"),
                "{script}"
            );
            assert!(!canary.exists(), "{script} ran a command");
        }
    }
}
