//! The command template of the DAG-job framework ([`ExecutorTemplate::Command`]).
//!
//! A task runs as `sh -c SCRIPT`, where SCRIPT is the template with its placeholders replaced.
//! Job and stage names come from workload files, which anyone may write, so a name must never
//! become shell syntax: every text value is substituted single-quoted (`'it'\''s'`), numbers
//! bare, and the template is read once from left to right, so a value that itself looks like a
//! placeholder (a job named `{stage}`) is never expanded again.
//!
//! [`ExecutorTemplate::Command`]: super::ExecutorTemplate::Command

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
