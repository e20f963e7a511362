//! The pure part: the registration socket's name and the `GetInfo` answer.

use thiserror::Error;

use crate::v1::PluginInfo;

/// The plugin kind kubelet routes to its CSI handler.
pub const CSI_PLUGIN_TYPE: &str = "CSIPlugin";

/// CSI spec versions offered to kubelet. kubelet's CSI handler picks the highest version it
/// supports and only accepts major version 1; node-driver-registrar offers "1.0.0" as well.
pub const SUPPORTED_VERSIONS: [&str; 1] = ["1.0.0"];

/// Why a driver name cannot name the registration socket.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NameError {
    /// GetPluginInfo returned no name.
    #[error("the CSI driver returned an empty name from GetPluginInfo; fix the driver's name")]
    Empty,
    /// The name would leave the registration directory or is not a plain file name.
    #[error(
        "the CSI driver name {0:?} cannot be a socket file name (it contains '/' or is '.' or \
         '..'); fix the driver's name"
    )]
    NotAFileName(String),
}

/// The registration socket's file name, `<driver>-reg.sock`, as node-driver-registrar names it.
pub fn socket_file_name(driver: &str) -> Result<String, NameError> {
    if driver.is_empty() {
        return Err(NameError::Empty);
    }
    // CSI names are DNS-like, but the name comes from another process: never let it choose a
    // path outside the directory kubelet watches.
    if driver.contains('/') || driver.contains('\0') || driver == "." || driver == ".." {
        return Err(NameError::NotAFileName(driver.to_string()));
    }
    Ok(format!("{driver}-reg.sock"))
}

/// The `GetInfo` answer: a CSI plugin named `driver`, which kubelet reaches at `endpoint`.
pub fn plugin_info(driver: &str, endpoint: &str) -> PluginInfo {
    PluginInfo {
        r#type: CSI_PLUGIN_TYPE.to_string(),
        name: driver.to_string(),
        endpoint: endpoint.to_string(),
        supported_versions: SUPPORTED_VERSIONS.iter().map(|v| v.to_string()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_names() {
        assert_eq!(
            socket_file_name("mock.csi.test").as_deref(),
            Ok("mock.csi.test-reg.sock")
        );
        assert_eq!(socket_file_name(""), Err(NameError::Empty));
        for bad in ["a/b", "/abs", "..", ".", "nul\0"] {
            assert_eq!(
                socket_file_name(bad),
                Err(NameError::NotAFileName(bad.to_string())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn get_info_answer() {
        let info = plugin_info("mock.csi.test", "/var/lib/kubelet/plugins/mock/csi.sock");
        assert_eq!(
            info,
            PluginInfo {
                r#type: "CSIPlugin".into(),
                name: "mock.csi.test".into(),
                endpoint: "/var/lib/kubelet/plugins/mock/csi.sock".into(),
                supported_versions: vec!["1.0.0".into()],
            }
        );
    }
}
