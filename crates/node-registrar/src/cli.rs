//! The command line: upstream node-driver-registrar's flag names where they exist.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// Registers a CSI driver with kubelet through kubelet's plugin-registration API.
#[derive(Debug, Clone, PartialEq, Eq, Parser)]
#[command(name = "node-registrar", version)]
pub struct Config {
    /// The CSI driver's socket as this process sees it: /path or unix:///path.
    #[arg(long, value_name = "ADDRESS", value_parser = csi_address_arg)]
    pub csi_address: String,
    /// The CSI driver's socket as kubelet sees it (returned to kubelet by GetInfo).
    #[arg(long, value_name = "PATH", value_parser = absolute_path_arg)]
    pub kubelet_registration_path: PathBuf,
    /// kubelet's plugin registration directory (`<kubelet root>/plugins_registry`); the
    /// registration socket `<driver name>-reg.sock` is created here.
    #[arg(long, value_name = "DIR", default_value = "/registration")]
    pub plugin_registration_path: PathBuf,
    /// Timeout of each CSI call (a Go duration). Upstream's default is 1s; 10s spares a slow
    /// start on a busy test machine a needless retry.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration_arg)]
    pub timeout: Duration,
    /// How long to wait for the CSI driver to answer GetPluginInfo at start (a Go duration);
    /// the driver may start after the registrar.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = duration_arg)]
    pub connection_timeout: Duration,
}

/// Parses the arguments (the first is the program name).
pub fn parse_args<I, T>(args: I) -> Result<Config, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    Config::try_parse_from(args)
}

fn csi_address_arg(value: &str) -> Result<String, String> {
    csi::address::socket_path(value)
        .map(|_| value.to_string())
        .map_err(|e| e.to_string())
}

fn absolute_path_arg(value: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(value);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(
            "kubelet needs an absolute path to the driver's socket, e.g. \
             /var/lib/kubelet/plugins/<driver>/csi.sock"
                .to_string(),
        )
    }
}

fn duration_arg(value: &str) -> Result<Duration, String> {
    let nanos = cli::duration::parse_go_duration(value).map_err(|e| e.to_string())?;
    u64::try_from(nanos)
        .ok()
        .filter(|&n| n > 0)
        .map(Duration::from_nanos)
        .ok_or_else(|| "must be a positive duration such as 10s".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &[&str]) -> Result<Config, clap::Error> {
        let base = [
            "node-registrar",
            "--csi-address=unix:///csi/csi.sock",
            "--kubelet-registration-path=/var/lib/kubelet/plugins/d/csi.sock",
        ];
        parse_args(base.iter().chain(extra))
    }

    #[test]
    fn defaults() {
        let cfg = parse(&[]).unwrap();
        assert_eq!(cfg.plugin_registration_path, PathBuf::from("/registration"));
        assert_eq!(cfg.timeout, Duration::from_secs(10));
        assert_eq!(cfg.connection_timeout, Duration::from_secs(60));
    }

    #[test]
    fn rejected_values() {
        for bad in [
            "--csi-address=localhost:1",
            "--kubelet-registration-path=relative/csi.sock",
            "--timeout=10",
            "--timeout=0s",
            "--connection-timeout=-1s",
        ] {
            assert!(parse(&[bad]).is_err(), "{bad} was accepted");
        }
        assert_eq!(
            parse(&["--timeout=1.5s"]).unwrap().timeout,
            Duration::from_millis(1500)
        );
    }
}
