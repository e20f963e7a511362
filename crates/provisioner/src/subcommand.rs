//! The subcommands (`release-node`, `capacity`): which one the command line
//! asks for, and its arguments, parsed by clap. Only a command line whose first argument names
//! a subcommand is parsed here; every other one is the provisioner's, whose pflag grammar the
//! `cli` crate keeps exactly as upstream's.

use clap::Parser;

use crate::{capacity_view, release_node};

/// A subcommand with its arguments.
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum Subcommand {
    /// Release the volumes of a node that is gone for good (lists what would be done unless
    /// --dry-run=false).
    #[command(name = release_node::SUBCOMMAND, args_override_self = true)]
    ReleaseNode(release_node::Args),
    /// Show, per topology segment and storage class, the capacity published for a driver and
    /// the claims waiting for a node.
    #[command(name = capacity_view::SUBCOMMAND, args_override_self = true)]
    Capacity(capacity_view::Args),
}

/// The whole command line of a subcommand, `argv[0]` first.
#[derive(Debug, Parser)]
#[command(
    name = "csi-provisioner",
    disable_help_subcommand = true,
    disable_version_flag = true
)]
struct Line {
    #[command(subcommand)]
    command: Subcommand,
}

/// The subcommand the command line (`argv[0]` first) asks for, parsed; `None` when its first
/// argument names none. A refused command line, or `--help`, is the `Err`: print it, and exit
/// with its [`clap::Error::exit_code`] (2 for refused arguments, 0 for help).
pub fn parse(args: &[String]) -> Option<Result<Subcommand, clap::Error>> {
    let first = args.get(1)?.as_str();
    if first == RETIRED_ADMISSION_POLICY {
        return Some(Err(retired_admission_policy()));
    }
    let names = [release_node::SUBCOMMAND, capacity_view::SUBCOMMAND];
    names
        .contains(&first)
        .then(|| Line::try_parse_from(args).map(|line| line.command))
}

/// The subcommand earlier versions had for the MutatingAdmissionPolicy that kept the
/// creating-volume finalizer; the write-ahead record replaced it.
const RETIRED_ADMISSION_POLICY: &str = "admission-policy";

/// What a command line asking for the retired `admission-policy` gets (exit status 2).
fn retired_admission_policy() -> clap::Error {
    use clap::CommandFactory;
    Line::command().error(
        clap::error::ErrorKind::InvalidSubcommand,
        "the admission-policy subcommand is retired: claims are held by the write-ahead record \
         and need no policy. Delete a policy installed earlier with `kubectl delete \
         mutatingadmissionpolicy,mutatingadmissionpolicybinding \
         csi-provisioner-creating-volume.<driver>` (docs/compatibility.md, \"The admission \
         policy, retired\")",
    )
}

/// The value of a boolean flag: only `true` or `false` (not Go's `1`, `t`, ...), as before clap.
pub(crate) fn bool_value() -> impl clap::builder::TypedValueParser<Value = bool> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["true", "false"]).map(|v| v == "true")
}

/// The cluster a subcommand talks to, with the caller's own credentials (release-node needs a
/// cluster administrator's).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct Cluster {
    /// Credentials of the cluster
    #[arg(
        long,
        value_name = "PATH",
        allow_hyphen_values = true,
        env = "KUBECONFIG",
        hide_env_values = true
    )]
    pub kubeconfig: Option<String>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Parses `csi-provisioner <words>`.
    pub(crate) fn parse_words(words: &[&str]) -> Option<Result<Subcommand, clap::Error>> {
        let line: Vec<String> = std::iter::once("csi-provisioner")
            .chain(words.iter().copied())
            .map(String::from)
            .collect();
        parse(&line)
    }

    #[test]
    fn only_a_named_subcommand_is_parsed_here() {
        assert!(parse_words(&[]).is_none());
        assert!(parse_words(&["--v=5"]).is_none());
        assert!(parse_words(&["--csi-address", "capacity"]).is_none());
        assert!(parse_words(&["help"]).is_none());
        assert!(matches!(
            parse_words(&["capacity", "--driver-name=d"]),
            Some(Ok(Subcommand::Capacity(_)))
        ));
        assert!(matches!(
            parse_words(&["release-node", "n1"]),
            Some(Ok(Subcommand::ReleaseNode(_)))
        ));
    }

    #[test]
    fn the_retired_admission_policy_says_what_to_do_instead() {
        let err = parse_words(&["admission-policy", "--driver-name=d"])
            .and_then(Result::err)
            .expect("refused");
        assert_eq!(err.exit_code(), 2);
        let text = err.to_string();
        assert!(text.contains("retired"), "{text}");
        assert!(
            text.contains("kubectl delete mutatingadmissionpolicy"),
            "{text}"
        );
    }

    #[test]
    fn refusals_exit_2_and_help_exits_0() {
        for words in [&["capacity"][..], &["release-node", "n1", "--forced"]] {
            let err = parse_words(words).and_then(Result::err).expect("refused");
            assert_eq!(err.exit_code(), 2, "{words:?}: {err}");
            assert!(err.to_string().contains("try '--help'"), "{err}");
        }
        for name in ["capacity", "release-node"] {
            let help = parse_words(&[name, "--help"])
                .and_then(Result::err)
                .expect("help");
            assert_eq!(help.exit_code(), 0);
            assert!(
                help.to_string()
                    .contains(&format!("Usage: csi-provisioner {name}")),
                "{help}"
            );
        }
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        use clap::CommandFactory;
        Line::command().debug_assert();
    }
}
