//! What the subcommands (`admission-policy`, `release-node`, `capacity`) share: which one the
//! command line asks for, and the walk over `--flag value` / `--flag=value` arguments.

/// Whether the command line (`argv[0]` first) asks for the subcommand `name`.
pub(crate) fn requested(args: &[String], name: &str) -> bool {
    args.get(1).map(String::as_str) == Some(name)
}

/// The arguments after the subcommand's name.
pub(crate) struct Walk<'a> {
    rest: std::slice::Iter<'a, String>,
}

impl<'a> Walk<'a> {
    pub(crate) fn new(args: &'a [String]) -> Self {
        Walk { rest: args.iter() }
    }

    /// The next argument: a flag with its `=value` if it has one, or a bare word.
    pub(crate) fn next_arg(&mut self) -> Option<(&'a str, Option<&'a str>)> {
        let arg = self.rest.next()?;
        Some(match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with('-') => (flag, Some(value)),
            _ => (arg.as_str(), None),
        })
    }

    /// The value of `flag`: its `=value`, else the next argument.
    pub(crate) fn value(&mut self, flag: &str, inline: Option<&str>) -> Result<String, String> {
        inline
            .map(str::to_string)
            .or_else(|| self.rest.next().cloned())
            .ok_or_else(|| format!("flag needs an argument: {flag}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_flags_values_and_words() {
        let args: Vec<String> = ["--a=1", "--b", "2", "word", "-o=json", "--c"]
            .map(String::from)
            .to_vec();
        let mut w = Walk::new(&args);
        let mut seen = Vec::new();
        while let Some((flag, inline)) = w.next_arg() {
            let v = if flag.starts_with('-') {
                w.value(flag, inline)
            } else {
                Ok(String::new())
            };
            seen.push((flag.to_string(), v));
        }
        assert_eq!(
            seen,
            [
                ("--a".into(), Ok("1".into())),
                ("--b".into(), Ok("2".into())),
                ("word".into(), Ok(String::new())),
                ("-o".into(), Ok("json".into())),
                ("--c".into(), Err("flag needs an argument: --c".into())),
            ]
        );
    }
}
