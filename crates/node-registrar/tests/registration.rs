//! The registration server in-process: kubelet's two calls over the real unix socket.

mod support;

use node_registrar::v1::{InfoRequest, PluginInfo, RegistrationStatus};
use node_registrar::{Listener, Stopped, plugin_info, socket_file_name};

const DRIVER: &str = "mock.csi.test";
const ENDPOINT: &str = "/var/lib/kubelet/plugins/mock.csi.test/csi.sock";

#[tokio::test]
async fn answers_get_info_and_stops_on_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(socket_file_name(DRIVER).unwrap());
    // A stale socket file from an earlier run must not stop the bind.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let listener = Listener::bind(&socket).unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(listener.serve(plugin_info(DRIVER, ENDPOINT), async {
        let _ = stop_rx.await;
    }));

    let mut client = support::registration_client(&socket);
    let info = client.get_info(InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(
        info,
        PluginInfo {
            r#type: "CSIPlugin".into(),
            name: DRIVER.into(),
            endpoint: ENDPOINT.into(),
            supported_versions: vec!["1.0.0".into()],
        }
    );
    // A successful registration only gets logged; the server keeps serving.
    client
        .notify_registration_status(RegistrationStatus {
            plugin_registered: true,
            error: String::new(),
        })
        .await
        .unwrap();
    client.get_info(InfoRequest {}).await.unwrap();
    assert!(!server.is_finished());

    stop_tx.send(()).unwrap();
    assert_eq!(server.await.unwrap().unwrap(), Stopped::Shutdown);
    assert!(!socket.exists(), "the socket outlived the server");
}

#[tokio::test]
async fn failed_registration_ends_serving() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(socket_file_name(DRIVER).unwrap());
    let listener = Listener::bind(&socket).unwrap();
    let server =
        tokio::spawn(listener.serve(plugin_info(DRIVER, ENDPOINT), std::future::pending()));

    let mut client = support::registration_client(&socket);
    client
        .notify_registration_status(RegistrationStatus {
            plugin_registered: false,
            error: "driver name mock.csi.test already registered".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        server.await.unwrap().unwrap(),
        Stopped::Rejected("driver name mock.csi.test already registered".into())
    );
    assert!(!socket.exists(), "the socket outlived the server");
}

#[test]
fn bind_names_a_missing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("missing/x-reg.sock");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = runtime.block_on(async { Listener::bind(&socket).unwrap_err() });
    let text = err.to_string();
    assert!(
        text.contains(&socket.display().to_string()) && text.contains("--plugin-registration-path"),
        "{text}"
    );
}
