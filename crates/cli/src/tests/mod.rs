//! Command-line tests: defaults, pflag forms and every flag (`flags`); validation messages,
//! environment and the argument lists of upstream's example deployments (`validation`).

use std::time::Duration;

use super::*;

mod flags;
mod validation;

pub(crate) const NO_ENV: &dyn Fn(&str) -> Option<String> = &|_| None;

pub(crate) fn env_of(
    pairs: &'static [(&'static str, &'static str)],
) -> impl Fn(&str) -> Option<String> {
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    }
}

pub(crate) fn parse(args: &[&str]) -> Result<Options, CliError> {
    parse_from(
        std::iter::once("csi-provisioner").chain(args.iter().copied()),
        NO_ENV,
    )
}

pub(crate) fn parse_env(
    args: &[&str],
    env: &'static [(&'static str, &'static str)],
) -> Result<Options, CliError> {
    parse_from(
        std::iter::once("csi-provisioner").chain(args.iter().copied()),
        &env_of(env),
    )
}

pub(crate) fn ok(args: &[&str]) -> Options {
    parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

pub(crate) fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}
