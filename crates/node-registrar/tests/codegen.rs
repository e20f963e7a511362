//! The generated bindings are checked in so that a normal build needs no protobuf compiler.
//! This test regenerates them from `proto/pluginregistration.proto` with protox and fails if the
//! checked-in file differs. Run with `NODE_REGISTRAR_REGENERATE=1` to rewrite it after editing
//! the .proto.

use std::path::{Path, PathBuf};

const GENERATED: &str = "pluginregistration.rs";

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn generate(out: &Path) {
    let mut compiler =
        protox::Compiler::new([crate_dir().join("proto")]).expect("proto include dir");
    compiler.include_imports(true).include_source_info(true);
    compiler
        .open_file("pluginregistration.proto")
        .expect("compile pluginregistration.proto");
    // The client is only for tests, but generating it here keeps one generated file.
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        .out_dir(out)
        .compile_fds(compiler.file_descriptor_set())
        .expect("generate Rust code");
}

#[test]
fn generated_code_is_current() {
    let tmp = tempfile::tempdir().unwrap();
    generate(tmp.path());
    let fresh = std::fs::read(tmp.path().join(GENERATED)).unwrap();
    let checked_in = crate_dir().join("src/gen").join(GENERATED);
    let current = std::fs::read(&checked_in).unwrap_or_default();
    if fresh == current {
        return;
    }
    if std::env::var_os("NODE_REGISTRAR_REGENERATE").is_some() {
        std::fs::write(&checked_in, &fresh).unwrap();
        return;
    }
    panic!(
        "generated file src/gen/{GENERATED} is stale; run \
         `NODE_REGISTRAR_REGENERATE=1 cargo test -p node-registrar --test codegen`"
    );
}
