//! `cargo xtask testenv build`: build the Go components from the committed wrapper modules
//! into a cache shared by all checkouts, then point `<target>/testenv-bin` at them.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// One Go component: a wrapper module under `tools/testenv/` and what to build from it.
pub struct Component {
    pub name: &'static str,
    /// Wrapper module directory, relative to the workspace root.
    pub wrapper: &'static str,
    /// The pinned module whose version names the build.
    pub module: &'static str,
    pub packages: &'static [&'static str],
    /// (name in `testenv-bin`, file name in the cache directory).
    pub outputs: &'static [(&'static str, &'static str)],
    /// Built only when asked (`--with-upstream`).
    pub optional: bool,
}

pub const COMPONENTS: &[Component] = &[
    Component {
        name: "k8s",
        wrapper: "tools/testenv/k8s",
        module: "k8s.io/kubernetes",
        packages: &[
            "k8s.io/kubernetes/cmd/kube-apiserver",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
            "k8s.io/kubernetes/cmd/kube-scheduler",
        ],
        outputs: &[
            ("kube-apiserver", "kube-apiserver"),
            ("kube-controller-manager", "kube-controller-manager"),
            ("kube-scheduler", "kube-scheduler"),
        ],
        optional: false,
    },
    Component {
        name: "csi-sanity",
        wrapper: "tools/testenv/csi-test",
        module: "github.com/kubernetes-csi/csi-test/v5",
        packages: &["github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity"],
        outputs: &[("csi-sanity", "csi-sanity")],
        optional: false,
    },
    Component {
        name: "external-provisioner",
        wrapper: "tools/testenv/external-provisioner",
        module: "github.com/kubernetes-csi/external-provisioner/v6",
        packages: &["github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"],
        outputs: &[("csi-provisioner-upstream", "csi-provisioner")],
        optional: true,
    },
];

/// Linker flags: stripped, with the version each upstream build stamps in.
pub fn ldflags(component: &str, version: &str) -> String {
    let mut flags = String::from("-s -w");
    match component {
        "k8s" => {
            let minor = version
                .trim_start_matches('v')
                .split('.')
                .nth(1)
                .unwrap_or("0");
            for pkg in [
                "k8s.io/component-base/version",
                "k8s.io/client-go/pkg/version",
            ] {
                flags.push_str(&format!(
                    " -X {pkg}.gitVersion={version} -X {pkg}.gitMajor=1 -X {pkg}.gitMinor={minor}"
                ));
            }
            flags.push_str(" -X k8s.io/component-base/version.gitTreeState=clean");
            flags.push_str(" -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z");
        }
        "csi-sanity" => flags.push_str(&format!(" -X main.VERSION={version}")),
        _ => flags.push_str(&format!(" -X main.version={version}")),
    }
    flags
}

/// The version `module` is required at in a go.mod (single-line or block form).
pub fn module_version(gomod: &str, module: &str) -> Option<String> {
    let mut in_require = false;
    for line in gomod.lines() {
        let line = line.split("//").next().unwrap_or("").trim();
        let fields: Vec<&str> = if in_require {
            if line == ")" {
                in_require = false;
                continue;
            }
            line.split_whitespace().collect()
        } else if line == "require (" {
            in_require = true;
            continue;
        } else if let Some(rest) = line.strip_prefix("require ") {
            rest.split_whitespace().collect()
        } else {
            continue;
        };
        if let [m, v] = fields[..]
            && m == module
        {
            return Some(v.to_string());
        }
    }
    None
}

/// 64-bit FNV-1a, a hash that is stable across Rust releases (unlike `DefaultHasher`).
pub fn fnv1a(data: impl IntoIterator<Item = u8>) -> u64 {
    data.into_iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// FNV-1a over the parts, each followed by a 0 byte so that moved bytes change the hash.
fn hash_parts(parts: &[&[u8]]) -> u64 {
    fnv1a(parts.iter().flat_map(|p| p.iter().copied().chain([0u8])))
}

/// `<component>-<version>-<go version>-<hash>`: a new wrapper go.mod/go.sum, Go release or
/// build recipe gets a new directory.
pub fn cache_key(component: &str, version: &str, go_version: &str, inputs: &[&[u8]]) -> String {
    let hash = hash_parts(inputs);
    format!("{component}-{version}-{go_version}-{:012x}", hash >> 16)
}

pub fn cache_root() -> Result<PathBuf> {
    let home = std::env::var_os("HOME").context("HOME is not set")?;
    Ok(PathBuf::from(home).join(".cache/csi-provisioner-rs"))
}

struct Plan<'a> {
    component: &'a Component,
    version: String,
    dir: PathBuf,
    ldflags: String,
    wrapper: PathBuf,
}

/// Builds what is missing and refreshes the symlinks in `<target>/testenv-bin`.
pub fn build(root: &Path, with_upstream: bool) -> Result<PathBuf> {
    let started = Instant::now();
    let cache = cache_root()?;
    let bins = cache.join("bin");
    fs::create_dir_all(&bins).with_context(|| format!("creating {}", bins.display()))?;
    let go_version = go_version()?;
    let mut links: Vec<(String, PathBuf)> = Vec::new();
    for component in COMPONENTS {
        let plan = plan(root, component, &go_version, &bins)?;
        let complete = plan.dir.join(".complete").is_file();
        if !complete && (!component.optional || with_upstream) {
            build_locked(&plan, &cache)?;
        }
        if plan.dir.join(".complete").is_file() {
            for (link, file) in component.outputs {
                links.push((link.to_string(), plan.dir.join(file)));
            }
        }
    }
    links.push(("etcd".into(), testenv::etcd_binary()));
    let bin_dir = testenv::target_dir().join("testenv-bin");
    refresh_links(&bin_dir, &links)?;
    println!(
        "testenv: binaries ready in {} ({:.2}s)",
        bin_dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(bin_dir)
}

fn plan<'a>(root: &Path, component: &'a Component, go: &str, bins: &Path) -> Result<Plan<'a>> {
    let wrapper = root.join(component.wrapper);
    let gomod = read(&wrapper.join("go.mod"))?;
    let gosum = read(&wrapper.join("go.sum"))?;
    let version = module_version(&gomod, component.module).with_context(|| {
        format!(
            "{}/go.mod does not require {}",
            wrapper.display(),
            component.module
        )
    })?;
    let ldflags = ldflags(component.name, &version);
    let recipe = format!("{:?} {ldflags} -tags=notest -pgo=off", component.packages);
    let inputs: [&[u8]; 3] = [gomod.as_bytes(), gosum.as_bytes(), recipe.as_bytes()];
    let key = cache_key(component.name, &version, go, &inputs);
    Ok(Plan {
        component,
        version,
        dir: bins.join(key),
        ldflags,
        wrapper,
    })
}

fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

fn go_version() -> Result<String> {
    let out = Command::new("go")
        .args(["env", "GOVERSION"])
        .env("GOTOOLCHAIN", "local")
        .output()
        .context("running `go env GOVERSION`: is the Go 1.26 toolchain installed and on PATH?")?;
    if !out.status.success() {
        bail!(
            "`go env GOVERSION` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Builds one component under an exclusive lock (parallel callers wait, then find it done)
/// into a temporary directory that is renamed into place only when complete.
fn build_locked(plan: &Plan<'_>, cache: &Path) -> Result<()> {
    let bins = cache.join("bin");
    let lock_path = bins.join(".lock");
    let lock =
        File::create(&lock_path).with_context(|| format!("creating {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    if plan.dir.join(".complete").is_file() {
        return Ok(());
    }
    remove_stale_temps(&bins);
    let name = plan
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = bins.join(format!(".tmp-{name}-{}", std::process::id()));
    fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;

    let c = plan.component;
    let outs: Vec<&str> = c.outputs.iter().map(|(_, f)| *f).collect();
    println!(
        "testenv: building {} {} ({}) with {} — cold builds take minutes",
        c.name,
        plan.version,
        outs.join(", "),
        plan.dir
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    );
    let started = Instant::now();
    run_go_build(plan, cache, &tmp)?;
    for file in &outs {
        if !tmp.join(file).is_file() {
            bail!(
                "go build succeeded but {} is missing",
                tmp.join(file).display()
            );
        }
    }
    let stamp = format!(
        "{} {} built in {:.1}s\n",
        c.name,
        plan.version,
        started.elapsed().as_secs_f64()
    );
    fs::write(tmp.join(".complete"), &stamp).context("writing .complete")?;
    if plan.dir.exists() {
        fs::remove_dir_all(&plan.dir)
            .with_context(|| format!("removing {}", plan.dir.display()))?;
    }
    fs::rename(&tmp, &plan.dir).with_context(|| format!("renaming into {}", plan.dir.display()))?;
    println!(
        "testenv: built {} in {:.1}s",
        c.name,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Leftovers of builds that died; only called while holding the lock, so none is in use.
fn remove_stale_temps(bins: &Path) {
    let Ok(entries) = fs::read_dir(bins) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        if e.file_name().to_string_lossy().starts_with(".tmp-") {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

fn run_go_build(plan: &Plan<'_>, cache: &Path, out: &Path) -> Result<()> {
    let c = plan.component;
    let target = if c.packages.len() == 1 {
        out.join(c.outputs[0].1)
    } else {
        // `-o dir/` with several main packages writes one binary per package.
        PathBuf::from(format!("{}/", out.display()))
    };
    let env: Vec<(&str, String)> = vec![
        ("GOTOOLCHAIN", "local".into()),
        ("CGO_ENABLED", "0".into()),
        ("GOWORK", "off".into()),
        ("GOFLAGS", "-trimpath".into()),
        ("GOMODCACHE", cache.join("gomod").display().to_string()),
        ("GOCACHE", cache.join("gocache").display().to_string()),
    ];
    let mut args: Vec<String> = vec![
        "build".into(),
        "-tags=notest".into(),
        "-pgo=off".into(),
        "-ldflags".into(),
        plan.ldflags.clone(),
        "-o".into(),
        target.display().to_string(),
    ];
    args.extend(c.packages.iter().map(|p| p.to_string()));
    let shown = format!(
        "cd {} && {} go {}",
        plan.wrapper.display(),
        env.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
        args.iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut child = Command::new("go")
        .args(&args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir(&plan.wrapper)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting: {shown}"))?;
    // Echo go's progress (module downloads) while keeping a copy for the failure report.
    let mut stderr_copy = String::new();
    if let Some(stderr) = child.stderr.take() {
        let mut console = std::io::stderr();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = writeln!(console, "  go: {line}");
            stderr_copy.push_str(&line);
            stderr_copy.push('\n');
        }
    }
    let status = child
        .wait()
        .with_context(|| format!("waiting for: {shown}"))?;
    if !status.success() {
        bail!(
            "building {} failed ({status}).\ncommand:\n  {shown}\nstderr:\n{stderr_copy}",
            c.name
        );
    }
    Ok(())
}

fn shell_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_=./:,@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Points each `<dir>/<name>` at its target, replacing stale links atomically.
fn refresh_links(dir: &Path, links: &[(String, PathBuf)]) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, target) in links {
        let link = dir.join(name);
        if fs::read_link(&link).is_ok_and(|t| &t == target) {
            continue;
        }
        let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
        let _ = fs::remove_file(&tmp);
        symlink(target, &tmp).with_context(|| format!("linking {}", tmp.display()))?;
        fs::rename(&tmp, &link).with_context(|| format!("replacing {}", link.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_versions_from_go_mod() {
        let block = "module x\n\ngo 1.26.0\n\nrequire (\n\tk8s.io/kubernetes v1.36.3\n\tfoo v1 // indirect\n)\n";
        let single = "module x\nrequire github.com/kubernetes-csi/csi-test/v5 v5.5.0\n";
        let cases = [
            (block, "k8s.io/kubernetes", Some("v1.36.3")),
            (block, "foo", Some("v1")),
            (block, "bar", None),
            (
                single,
                "github.com/kubernetes-csi/csi-test/v5",
                Some("v5.5.0"),
            ),
            (
                "replace k8s.io/api => k8s.io/api v0.36.3\n",
                "k8s.io/api",
                None,
            ),
        ];
        for (gomod, module, want) in cases {
            assert_eq!(module_version(gomod, module).as_deref(), want, "{module}");
        }
    }

    #[test]
    fn committed_wrappers_pin_the_expected_versions() {
        let root = testenv::workspace_root();
        let want = [
            ("k8s", "v1.36.3"),
            ("csi-sanity", "v5.5.0"),
            ("external-provisioner", "v6.3.0"),
        ];
        for (name, version) in want {
            let c = COMPONENTS.iter().find(|c| c.name == name).expect(name);
            let gomod = read(&root.join(c.wrapper).join("go.mod")).expect("go.mod");
            assert_eq!(
                module_version(&gomod, c.module).as_deref(),
                Some(version),
                "{name}"
            );
        }
    }

    #[test]
    fn ldflags_stamp_versions() {
        let k8s = ldflags("k8s", "v1.36.3");
        for want in [
            "-s -w",
            "-X k8s.io/component-base/version.gitVersion=v1.36.3",
            "-X k8s.io/component-base/version.gitMinor=36",
            "-X k8s.io/client-go/pkg/version.gitVersion=v1.36.3",
            "-X k8s.io/client-go/pkg/version.gitMinor=36",
            "-X k8s.io/component-base/version.gitTreeState=clean",
        ] {
            assert!(k8s.contains(want), "{want} missing from {k8s}");
        }
        assert_eq!(
            ldflags("csi-sanity", "v5.5.0"),
            "-s -w -X main.VERSION=v5.5.0"
        );
        assert_eq!(
            ldflags("external-provisioner", "v6.3.0"),
            "-s -w -X main.version=v6.3.0"
        );
    }

    #[test]
    fn cache_keys_change_with_every_input() {
        let base = cache_key("k8s", "v1.36.3", "go1.26.8", &[b"mod", b"sum"]);
        assert!(base.starts_with("k8s-v1.36.3-go1.26.8-"), "{base}");
        assert_eq!(
            base,
            cache_key("k8s", "v1.36.3", "go1.26.8", &[b"mod", b"sum"])
        );
        let variants = [
            cache_key("k8s", "v1.36.3", "go1.26.9", &[b"mod", b"sum"]),
            cache_key("k8s", "v1.36.3", "go1.26.8", &[b"mod2", b"sum"]),
            cache_key("k8s", "v1.36.3", "go1.26.8", &[b"mod", b"sum2"]),
            // The separator keeps moved bytes from colliding.
            cache_key("k8s", "v1.36.3", "go1.26.8", &[b"mo", b"dsum"]),
        ];
        for v in variants {
            assert_ne!(v, base);
        }
    }

    #[test]
    fn fnv1a_test_vectors() {
        let cases: [(&[u8], u64); 3] = [
            (b"", 0xcbf2_9ce4_8422_2325),
            (b"a", 0xaf63_dc4c_8601_ec8c),
            (b"foobar", 0x8594_4171_f739_67e8),
        ];
        for (input, want) in cases {
            assert_eq!(fnv1a(input.iter().copied()), want, "{input:?}");
        }
        assert_eq!(hash_parts(&[b"a", b"b"]), fnv1a(*b"a\0b\0"));
    }

    #[test]
    fn shell_quoting() {
        let cases = [
            ("go", "go"),
            ("-ldflags", "-ldflags"),
            ("-s -w", "'-s -w'"),
            ("it's", r"'it'\''s'"),
        ];
        for (input, want) in cases {
            assert_eq!(shell_quote(input), want);
        }
    }
}
