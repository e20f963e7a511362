//! The generated bindings are checked in so that a normal build needs no protobuf compiler.
//! This test regenerates them from `proto/csi.proto` with protox and fails if the checked-in
//! files differ. Run with `CSI_REGENERATE=1` to rewrite them after editing the .proto.

use std::path::{Path, PathBuf};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn generate(out: &Path) {
    let mut compiler =
        protox::Compiler::new([crate_dir().join("proto")]).expect("proto include dir");
    compiler.include_imports(true).include_source_info(true);
    compiler.open_file("csi.proto").expect("compile csi.proto");
    // Encoding through prost_types would drop extension options such as `csi_secret`, which
    // the sanitiser reads from this file; protox's own encoder keeps them.
    std::fs::write(
        out.join("csi_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )
    .unwrap();
    let fds = compiler.file_descriptor_set();
    // `prost::Name` impls let `csi::sanitize` find a message's descriptor by its full name.
    let mut config = tonic_prost_build::Config::new();
    config.enable_type_names();
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        .out_dir(out)
        .compile_fds_with_config(fds, config)
        .expect("generate Rust code");
}

#[test]
fn generated_code_is_current() {
    let tmp = tempfile::tempdir().unwrap();
    generate(tmp.path());
    let checked_in = crate_dir().join("src/gen");
    let mut stale = Vec::new();
    for name in ["csi.v1.rs", "csi_descriptor.bin"] {
        let fresh = std::fs::read(tmp.path().join(name)).unwrap();
        let current = std::fs::read(checked_in.join(name)).unwrap_or_default();
        if fresh != current {
            if std::env::var_os("CSI_REGENERATE").is_some() {
                std::fs::write(checked_in.join(name), &fresh).unwrap();
            } else {
                stale.push(name);
            }
        }
    }
    assert!(
        stale.is_empty(),
        "generated files {stale:?} are stale; run `CSI_REGENERATE=1 cargo test -p csi --test codegen`"
    );
}
