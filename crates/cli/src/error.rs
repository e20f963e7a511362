//! Command-line errors. Every message except the help text is one line that names the flag (or
//! environment variable) and says what is accepted.

use klog::go_quote;
use thiserror::Error;

/// Why the command line was not accepted. The binary prints it and exits with
/// [`CliError::exit_code`]: help goes to stdout with 0, everything else to stderr with 2.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CliError {
    /// `-h` / `--help`: the usage text, not a failure.
    #[error("{0}")]
    Help(String),
    /// The command line itself is malformed: an unknown flag, a missing value.
    #[error("{0}")]
    Syntax(String),
    /// A flag value does not fit the flag's grammar.
    #[error("invalid value {} for flag --{flag}: {expected}", go_quote(value))]
    InvalidValue {
        flag: &'static str,
        value: String,
        expected: String,
    },
    /// A well-formed value that is not usable, alone or with other flags.
    #[error("flag --{flag}: {reason}")]
    Invalid { flag: &'static str, reason: String },
    /// A flag needs an environment variable that is unset or empty.
    #[error("the {var} environment variable must be set when {when}")]
    MissingEnv {
        var: &'static str,
        when: &'static str,
    },
}

impl CliError {
    /// The process exit code: 0 for help, 2 for every usage error (like Go's flag package).
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Help(_) => 0,
            _ => 2,
        }
    }

    /// Whether this is the help text, to be printed to stdout.
    pub fn is_help(&self) -> bool {
        matches!(self, Self::Help(_))
    }

    pub(crate) fn value(flag: &'static str, value: &str, expected: impl Into<String>) -> Self {
        Self::InvalidValue {
            flag,
            value: value.to_string(),
            expected: expected.into(),
        }
    }

    pub(crate) fn invalid(flag: &'static str, reason: impl Into<String>) -> Self {
        Self::Invalid {
            flag,
            reason: reason.into(),
        }
    }
}

/// Turns a clap error into ours, keeping it to one line with pflag's wording where there is one.
pub(crate) fn from_clap(err: &clap::Error) -> CliError {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let context = |kind| match err.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => v.first().cloned(),
        _ => None,
    };
    match err.kind() {
        ErrorKind::DisplayHelp => CliError::Help(err.render().to_string()),
        ErrorKind::UnknownArgument => {
            let arg = context(ContextKind::InvalidArg).unwrap_or_default();
            let hint = context(ContextKind::SuggestedArg)
                .map(|s| format!(" (did you mean {s}?)"))
                .unwrap_or_default();
            if arg.starts_with("--") || !arg.starts_with('-') {
                CliError::Syntax(format!("unknown flag: {arg}{hint}"))
            } else {
                CliError::Syntax(format!("unknown shorthand flag: {arg}{hint}"))
            }
        }
        ErrorKind::InvalidValue | ErrorKind::NoEquals
            if context(ContextKind::InvalidValue).is_none_or(|v| v.is_empty()) =>
        {
            let arg = context(ContextKind::InvalidArg).unwrap_or_default();
            let flag = arg.split([' ', '=']).next().unwrap_or_default();
            CliError::Syntax(format!("flag needs an argument: {flag}"))
        }
        _ => {
            let rendered = err.render().to_string();
            let first = rendered.lines().next().unwrap_or("invalid command line");
            CliError::Syntax(first.trim_start_matches("error: ").to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_single_lines() {
        let e = CliError::value("timeout", "a\nb", "expected a Go duration");
        assert_eq!(
            e.to_string(),
            r#"invalid value "a\nb" for flag --timeout: expected a Go duration"#
        );
        let e = CliError::invalid("worker-threads", "must be greater than 0");
        assert_eq!(
            e.to_string(),
            "flag --worker-threads: must be greater than 0"
        );
        let e = CliError::MissingEnv {
            var: "NODE_NAME",
            when: "--node-deployment is set",
        };
        assert_eq!(
            e.to_string(),
            "the NODE_NAME environment variable must be set when --node-deployment is set"
        );
    }

    #[test]
    fn exit_codes() {
        assert_eq!(CliError::Help("usage".into()).exit_code(), 0);
        assert_eq!(CliError::Syntax("x".into()).exit_code(), 2);
        assert_eq!(CliError::invalid("x", "y").exit_code(), 2);
    }
}
