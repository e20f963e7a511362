//! The `csi-provisioner` command line: every flag of upstream external-provisioner v6.3.0 with
//! the same names, defaults and pflag syntax, Go's value grammars (durations, integers,
//! booleans), the environment variables upstream reads, and upstream main's start-up checks.
//!
//! ```
//! let env = |name: &str| (name == "NAMESPACE" || name == "POD_NAME").then(|| "x".to_string());
//! let opts = cli::parse_from(
//!     ["csi-provisioner", "--csi-address=/csi/csi.sock", "--enable-capacity", "-v=5"],
//!     &env,
//! )
//! .unwrap();
//! assert!(opts.enable_capacity);
//! assert_eq!(opts.logging.verbosity, 5);
//! ```

// No unsafe code here: `forbid`, unlike the workspace's `deny`, cannot be allowed again below.
#![forbid(unsafe_code)]
// Shipped code reports failures instead of panicking; tests are free to unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod args;
mod convert;
pub mod duration;
mod error;
pub mod gates;
pub mod goparse;
mod ignored;
mod labels;
mod options;
mod validate;

use std::collections::BTreeSet;
use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

pub use duration::{DurationError, format_go_duration, parse_go_duration};
pub use error::CliError;
pub use gates::{Feature, FeatureGates};
pub use options::{Env, LoggingOptions, Options, StaleAction, process_env, version_line};

/// Parses a command line (`args[0]` is the program name) and the environment read through `env`,
/// then validates them as upstream main does.
///
/// With `--version`, only the checks upstream makes before printing the version run (logging
/// flags, feature gates, NODE_NAME); the caller prints [`version_line`] and exits 0 when
/// [`Options::show_version`] is set.
pub fn parse_from<I, T>(args: I, env: &dyn Fn(&str) -> Option<String>) -> Result<Options, CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let command = args::RawArgs::command();
    let matches = command
        .clone()
        .try_get_matches_from(args)
        .map_err(|e| error::from_clap(&e))?;
    let explicit: BTreeSet<String> = command
        .get_arguments()
        .filter(|a| matches.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine))
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    let raw = args::RawArgs::from_arg_matches(&matches).map_err(|e| error::from_clap(&e))?;
    let (mut opts, gates) = convert::convert(raw, Env::from_lookup(env))?;
    opts.explicit = explicit;
    validate::stage_one(&mut opts, &gates)?;
    if !opts.show_version {
        validate::stage_two(&opts)?;
    }
    Ok(opts)
}

/// The usage text `--help` prints.
pub fn usage() -> String {
    args::RawArgs::command().render_help().to_string()
}

#[cfg(test)]
mod tests;
