//! The `--csi-address` forms we accept.

use std::path::PathBuf;

/// Why an address cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// Nothing was given.
    #[error("CSI address is empty; pass the driver's socket, e.g. --csi-address=/csi/csi.sock")]
    Empty,
    /// `unix://` or `unix:` with no path after it.
    #[error(
        "CSI address {0:?} names no socket path; use unix:///path/to/csi.sock or /path/to/csi.sock"
    )]
    NoPath(String),
    /// A gRPC target that is not a unix socket, e.g. `dns:///host:port` or `host:port`.
    #[error(
        "CSI address {0:?} is not a unix socket; only /path, unix:///path and unix:path are \
         supported (upstream also accepts gRPC TCP targets, this implementation does not yet)"
    )]
    NotUnix(String),
}

/// Turns a CSI address into the unix socket path to dial.
///
/// Like csi-lib-utils: a bare absolute path and `unix:///path` mean a unix socket (everything
/// after `unix://` is the path, so `unix://relative` is the relative path `relative`), and gRPC's
/// `unix:path` form is accepted as well. Upstream also passes any other string to gRPC as a
/// target (such as TCP `host:port`); we reject those with [`AddressError::NotUnix`] for now.
pub fn socket_path(address: &str) -> Result<PathBuf, AddressError> {
    if address.is_empty() {
        return Err(AddressError::Empty);
    }
    if address.starts_with('/') {
        return Ok(PathBuf::from(address));
    }
    let rest = address
        .strip_prefix("unix://")
        .or_else(|| address.strip_prefix("unix:"))
        .ok_or_else(|| AddressError::NotUnix(address.to_string()))?;
    if rest.is_empty() {
        return Err(AddressError::NoPath(address.to_string()));
    }
    Ok(PathBuf::from(rest))
}

/// The `unix://` form used in log lines, as upstream prints it.
pub fn display_address(path: &std::path::Path) -> String {
    format!("unix://{}", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_forms() {
        let ok = [
            ("/csi/csi.sock", "/csi/csi.sock"),
            ("unix:///csi/csi.sock", "/csi/csi.sock"),
            ("unix:/csi/csi.sock", "/csi/csi.sock"),
            ("unix:csi.sock", "csi.sock"),
            ("unix://csi.sock", "csi.sock"),
        ];
        for (input, want) in ok {
            assert_eq!(
                socket_path(input),
                Ok(PathBuf::from(want)),
                "input {input:?}"
            );
        }
        let bad = [
            ("", AddressError::Empty),
            ("unix://", AddressError::NoPath("unix://".into())),
            ("unix:", AddressError::NoPath("unix:".into())),
            (
                "localhost:10000",
                AddressError::NotUnix("localhost:10000".into()),
            ),
            (
                "dns:///driver:10000",
                AddressError::NotUnix("dns:///driver:10000".into()),
            ),
            ("csi.sock", AddressError::NotUnix("csi.sock".into())),
            (
                "unix-abstract:x",
                AddressError::NotUnix("unix-abstract:x".into()),
            ),
        ];
        for (input, want) in bad {
            assert_eq!(socket_path(input), Err(want), "input {input:?}");
        }
    }

    #[test]
    fn errors_say_what_to_pass() {
        let msg = socket_path("localhost:1").unwrap_err().to_string();
        assert!(msg.contains("unix:///path") && msg.contains("TCP"), "{msg}");
    }

    #[test]
    fn display_form_is_unix_url() {
        assert_eq!(
            display_address(std::path::Path::new("/a/b.sock")),
            "unix:///a/b.sock"
        );
    }
}
