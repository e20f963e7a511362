//! The real node's container images, made here (there is no registry to pull from): busybox
//! from Debian's static build with its applet links, and a pause image from our own few lines
//! of C (`tools/testenv/node/pause.c`). Each is a docker-archive tarball (a manifest, a config
//! and one layer) imported into containerd with `ctr`.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::config::{self, NodeLayout};
use crate::Error;
use crate::error::IoContext;

/// What goes into an image's root file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rootfs {
    Pause,
    Busybox,
    /// busybox plus `/agnhost`.
    Agnhost,
}

/// One image to make: its name, what goes into its root file system, and how it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSpec {
    pub name: &'static str,
    pub rootfs: Rootfs,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
}

impl ImageSpec {
    /// The tarball's file name: the tag itself, so a new tag is never served an old tarball.
    pub fn tarball_name(&self) -> String {
        format!("{}.tar", self.name.replace(['/', ':'], "_"))
    }
}

pub fn specs() -> [ImageSpec; 4] {
    [
        ImageSpec {
            name: config::PAUSE_IMAGE,
            rootfs: Rootfs::Pause,
            entrypoint: vec!["/pause".into()],
            cmd: Vec::new(),
        },
        ImageSpec {
            name: config::BUSYBOX_IMAGE,
            rootfs: Rootfs::Busybox,
            entrypoint: Vec::new(),
            cmd: vec!["/bin/sh".into()],
        },
        ImageSpec {
            name: config::NGINX_IMAGE,
            rootfs: Rootfs::Busybox,
            entrypoint: Vec::new(),
            cmd: vec!["/bin/sh".into()],
        },
        ImageSpec {
            name: config::AGNHOST_IMAGE,
            rootfs: Rootfs::Agnhost,
            entrypoint: vec!["/agnhost".into()],
            cmd: vec!["pause".into()],
        },
    ]
}

/// The image config (OCI/docker image JSON) for a layer whose uncompressed digest is
/// `diff_id` (`sha256:...`).
pub fn image_config(spec: &ImageSpec, diff_id: &str) -> String {
    let mut cfg = serde_json::json!({
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    });
    if !spec.entrypoint.is_empty() {
        cfg["Entrypoint"] = serde_json::json!(spec.entrypoint);
    }
    if !spec.cmd.is_empty() {
        cfg["Cmd"] = serde_json::json!(spec.cmd);
    }
    serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": cfg,
        "rootfs": { "type": "layers", "diff_ids": [diff_id] },
    })
    .to_string()
}

/// The docker-archive `manifest.json` naming the config, the tag and the layer.
pub fn archive_manifest(spec: &ImageSpec) -> String {
    serde_json::json!([{
        "Config": "config.json",
        "RepoTags": [spec.name],
        "Layers": ["layer.tar"],
    }])
    .to_string()
}

/// Makes the images that are not yet in the images directory and imports all of them into
/// the node's containerd (at `socket`).
pub fn build_and_import(layout: &NodeLayout, socket: &Path) -> Result<(), Error> {
    let dir = layout.images();
    fs::create_dir_all(&dir).ctx(|| format!("creating {}", dir.display()))?;
    let agnhost = crate::paths::try_go_binary("agnhost").ok();
    for spec in specs() {
        if spec.rootfs == Rootfs::Agnhost && agnhost.is_none() {
            continue;
        }
        let tarball = dir.join(spec.tarball_name());
        if !tarball.exists() {
            build(&spec, &dir, &tarball, agnhost.as_deref())?;
        }
        run(Command::new("ctr")
            .arg("--address")
            .arg(socket)
            .args(["-n", "k8s.io", "images", "import"])
            .arg(&tarball))?;
    }
    Ok(())
}

fn build(
    spec: &ImageSpec,
    dir: &Path,
    tarball: &Path,
    agnhost: Option<&Path>,
) -> Result<(), Error> {
    let work = dir.join(format!("{}.work", spec.tarball_name()));
    let _ = fs::remove_dir_all(&work);
    let rootfs = work.join("rootfs");
    fs::create_dir_all(&rootfs).ctx(|| format!("creating {}", rootfs.display()))?;
    match (spec.rootfs, agnhost) {
        (Rootfs::Pause, _) => pause_rootfs(&rootfs)?,
        (Rootfs::Busybox, _) => busybox_rootfs(&rootfs)?,
        (Rootfs::Agnhost, Some(binary)) => {
            busybox_rootfs(&rootfs)?;
            fs::copy(binary, rootfs.join("agnhost"))
                .ctx(|| format!("copying {}", binary.display()))?;
        }
        (Rootfs::Agnhost, None) => {
            return Err(Error::NotReady(
                "agnhost is not built: run cargo xtask e2e (it builds it)".into(),
            ));
        }
    }
    let layer = work.join("layer.tar");
    run(Command::new("tar")
        .arg("--numeric-owner")
        .arg("-C")
        .arg(&rootfs)
        .arg("-cf")
        .arg(&layer)
        .arg("."))?;
    let digest = sha256(&layer)?;
    let files = [
        (
            "config.json",
            image_config(spec, &format!("sha256:{digest}")),
        ),
        ("manifest.json", archive_manifest(spec)),
    ];
    for (name, text) in files {
        let path = work.join(name);
        fs::write(&path, text).ctx(|| format!("writing {}", path.display()))?;
    }
    // Written beside, then renamed: a half-made tarball must never look finished.
    let partial = tarball.with_extension("partial");
    run(Command::new("tar")
        .arg("-C")
        .arg(&work)
        .arg("-cf")
        .arg(&partial)
        .args(["manifest.json", "config.json", "layer.tar"]))?;
    fs::rename(&partial, tarball).ctx(|| format!("renaming {}", partial.display()))?;
    let _ = fs::remove_dir_all(&work);
    Ok(())
}

fn pause_rootfs(rootfs: &Path) -> Result<(), Error> {
    let source = crate::workspace_root().join("tools/testenv/node/pause.c");
    run(Command::new("gcc")
        .args(["-static", "-O2", "-s", "-o"])
        .arg(rootfs.join("pause"))
        .arg(&source))
}

fn busybox_rootfs(rootfs: &Path) -> Result<(), Error> {
    let bin = rootfs.join("bin");
    for d in [bin.clone(), rootfs.join("tmp"), rootfs.join("etc")] {
        fs::create_dir_all(&d).ctx(|| format!("creating {}", d.display()))?;
    }
    let busybox = PathBuf::from("/bin/busybox");
    fs::copy(&busybox, bin.join("busybox")).ctx(|| {
        "copying /bin/busybox (install Debian's busybox-static: apt-get install busybox-static)"
            .to_string()
    })?;
    let list = Command::new(&busybox)
        .arg("--list")
        .output()
        .ctx(|| "running busybox --list".to_string())?;
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        let applet = applet.trim();
        if !applet.is_empty() && applet != "busybox" && !applet.contains('/') {
            symlink("busybox", bin.join(applet)).ctx(|| format!("linking {applet}"))?;
        }
    }
    let passwd = rootfs.join("etc/passwd");
    fs::write(&passwd, "root:x:0:0:root:/root:/bin/sh\n")
        .ctx(|| format!("writing {}", passwd.display()))
}

fn sha256(path: &Path) -> Result<String, Error> {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .ctx(|| format!("sha256sum {}", path.display()))?;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .filter(|d| d.len() == 64)
        .map(str::to_string)
        .ok_or_else(|| Error::NotReady(format!("sha256sum {} printed no digest", path.display())))
}

/// Runs a helper command to completion; its stderr is in the error when it fails.
pub(crate) fn run(cmd: &mut Command) -> Result<(), Error> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().ctx(|| format!("running {shown}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::NotReady(format!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_and_manifest_name_the_layer_and_the_tag() {
        let [pause, busybox, nginx, agnhost] = specs();
        assert_eq!(nginx.rootfs, Rootfs::Busybox);
        assert_eq!(
            busybox.tarball_name(),
            "registry.k8s.io_e2e-test-images_busybox_1.37.0-2.tar"
        );
        let cfg: serde_json::Value =
            serde_json::from_str(&image_config(&agnhost, "sha256:0")).unwrap();
        assert_eq!(cfg["config"]["Entrypoint"][0], "/agnhost");
        assert_eq!(cfg["config"]["Cmd"][0], "pause");
        let cfg: serde_json::Value =
            serde_json::from_str(&image_config(&pause, "sha256:abc")).unwrap();
        assert_eq!(cfg["rootfs"]["diff_ids"][0], "sha256:abc");
        assert_eq!(cfg["config"]["Entrypoint"][0], "/pause");
        assert!(cfg["config"].get("Cmd").is_none());
        assert_eq!(cfg["os"], "linux");
        let cfg: serde_json::Value =
            serde_json::from_str(&image_config(&busybox, "sha256:def")).unwrap();
        assert_eq!(cfg["config"]["Cmd"][0], "/bin/sh");
        let manifest: serde_json::Value =
            serde_json::from_str(&archive_manifest(&busybox)).unwrap();
        assert_eq!(manifest[0]["RepoTags"][0], config::BUSYBOX_IMAGE);
        assert_eq!(manifest[0]["Layers"][0], "layer.tar");
        assert_eq!(manifest[0]["Config"], "config.json");
    }
}
