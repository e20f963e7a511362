//! The arguments of `csi-provisioner release-node`.

use std::path::PathBuf;
use std::time::Duration;

/// How long a refused create is retried by default: a quota controller frees a deleted claim's
/// count within seconds, an operator fixing a webhook takes longer and re-runs.
const DEFAULT_RETRY: &str = "2m";

/// The subcommand's arguments.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Args {
    /// The lost node; its Node object must be deleted first
    #[arg(value_name = "NODE", required = true,
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub node: String,
    /// Only PVs of this CSI driver [default: all CSI drivers]
    #[arg(long = "driver-name", value_name = "NAME", allow_hyphen_values = true)]
    pub driver: Option<String>,
    /// false releases; the default only lists what would be done
    #[arg(long, value_name = "true|false", num_args = 0..=1, require_equals = true,
          default_value = "true", default_missing_value = "true", hide_possible_values = true,
          value_parser = crate::subcommand::bool_value())]
    pub dry_run: bool,
    #[command(flatten)]
    pub cluster: crate::subcommand::Cluster,
    /// Release although the node shows signs of life (a fresh kubelet Lease, Running pods,
    /// capacity objects written recently)
    #[arg(long, value_name = "true|false", num_args = 0..=1, require_equals = true,
          default_value = "false", default_missing_value = "true", hide_possible_values = true,
          value_parser = crate::subcommand::bool_value())]
    pub force: bool,
    /// Where the claims to create again are recorded before anything changes [default:
    /// ./release-node-NODE.json]; a re-run with the same file creates those a stopped run left
    #[arg(long = "state-file", value_name = "PATH", allow_hyphen_values = true)]
    pub state_file_flag: Option<PathBuf>,
    /// How long a refused create of a claim is retried, e.g. 30s, 5m
    #[arg(long = "retry-timeout", value_name = "DURATION", allow_hyphen_values = true,
          default_value = DEFAULT_RETRY, value_parser = retry_timeout)]
    pub retry_for: Duration,
}

impl Args {
    /// The record of the claims to create again: `--state-file`, else
    /// `release-node-NODE.json` in the current directory.
    pub fn state_file(&self) -> PathBuf {
        self.state_file_flag
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("release-node-{}.json", self.node)))
    }
}

/// A `--retry-timeout`: a Go duration, not negative.
fn retry_timeout(raw: &str) -> Result<Duration, String> {
    match cli::parse_go_duration(raw) {
        Ok(ns) if ns >= 0 => Ok(Duration::from_nanos(ns as u64)),
        _ => Err("use a duration such as 30s or 5m".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subcommand::Subcommand;

    fn parse(words: &[&str]) -> Result<Args, String> {
        let line = [&[super::super::SUBCOMMAND], words].concat();
        match crate::subcommand::tests::parse_words(&line) {
            Some(Ok(Subcommand::ReleaseNode(args))) => Ok(args),
            Some(Err(err)) => Err(err.to_string()),
            other => panic!("{words:?}: {other:?}"),
        }
    }

    #[test]
    fn parse_table() {
        let got = parse(&["n1"]).unwrap();
        assert_eq!(
            (got.node.as_str(), got.dry_run, got.driver),
            ("n1", true, None)
        );
        let got = parse(&["--dry-run=false", "n1", "--driver-name", "d"]).unwrap();
        assert_eq!(
            (got.node.as_str(), got.dry_run, got.driver.as_deref()),
            ("n1", false, Some("d"))
        );
        let got = parse(&["n1", "--kubeconfig=/k"]).unwrap();
        assert_eq!(got.cluster.kubeconfig.as_deref(), Some("/k"));
        // A bare bool flag is true; `--dry-run false` would leave `false` a second NODE.
        let got = parse(&["n1", "--dry-run=false", "--dry-run"]).unwrap();
        assert!(got.dry_run);
        for (bad, message) in [
            (
                &[][..],
                "the following required arguments were not provided",
            ),
            (&[""][..], "a value is required for '<NODE>'"),
            (&["n1", "n2"][..], "unexpected argument 'n2'"),
            (
                &["n1", "--dry-run", "false"][..],
                "unexpected argument 'false'",
            ),
            (
                &["n1", "--dry-run=maybe"][..],
                "invalid value 'maybe' for '--dry-run",
            ),
            (&["n1", "--forced"][..], "unexpected argument '--forced'"),
            (
                &["n1", "--force=maybe"][..],
                "invalid value 'maybe' for '--force",
            ),
            (
                &["n1", "--retry-timeout=soon"][..],
                "invalid value 'soon' for '--retry-timeout <DURATION>'",
            ),
            (
                &["n1", "--retry-timeout=-1s"][..],
                "invalid value '-1s' for '--retry-timeout <DURATION>'",
            ),
            (
                &["n1", "--state-file"][..],
                "a value is required for '--state-file <PATH>'",
            ),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(message), "{bad:?}: {err}");
            assert!(err.contains("try '--help'"), "{err}");
        }
        // The state file defaults to the current directory, named after the node.
        let got = parse(&["n1"]).unwrap();
        assert_eq!(
            (got.force, got.state_file(), got.retry_for),
            (
                false,
                PathBuf::from("release-node-n1.json"),
                Duration::from_secs(120)
            )
        );
        let got = parse(&[
            "n1",
            "--force",
            "--state-file=/tmp/r.json",
            "--retry-timeout",
            "5s",
        ])
        .unwrap();
        assert_eq!(
            (got.force, got.state_file(), got.retry_for),
            (true, PathBuf::from("/tmp/r.json"), Duration::from_secs(5))
        );
    }
}
