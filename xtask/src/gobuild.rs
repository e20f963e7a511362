//! `cargo xtask testenv build`: build the Go components (committed wrapper modules, plus
//! third-party source the proxy refuses, from a writable copy) into a cache shared by all
//! checkouts, then point `<target>/testenv-bin` at them.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::recipe::{
    COMPONENTS, Component, Source, cache_key, k8s_wrapper_dir, ldflags, module_version, recipe,
    rewrite_replaces,
};
use crate::thirdparty::{copy_tree, third_party_present, tree_digest};

pub fn cache_root() -> Result<PathBuf> {
    let home = std::env::var_os("HOME").context("HOME is not set")?;
    Ok(PathBuf::from(home).join(".cache/csi-provisioner-rs"))
}

struct Plan<'a> {
    component: &'a Component,
    version: String,
    dir: PathBuf,
    ldflags: String,
    /// The module directory: a wrapper, or third-party source that is copied before building;
    /// `None` for a proxy module, downloaded only when it is built.
    module_dir: Option<PathBuf>,
}

/// Builds what is missing and refreshes the symlinks in `<target>/testenv-bin`, with the
/// control plane of Kubernetes `kubernetes` (`None`: the default, see
/// [`crate::recipe::k8s_wrapper_dir`]).
pub fn build(root: &Path, with_upstream: bool, kubernetes: Option<&str>) -> Result<PathBuf> {
    let started = Instant::now();
    let cache = cache_root()?;
    let bins = cache.join("bin");
    fs::create_dir_all(&bins).with_context(|| format!("creating {}", bins.display()))?;
    let go_version = go_version()?;
    let mut links: Vec<(String, PathBuf)> = Vec::new();
    for component in COMPONENTS {
        let plan = plan(root, component, &go_version, &bins, kubernetes)?;
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

fn plan<'a>(
    root: &Path,
    component: &'a Component,
    go: &str,
    bins: &Path,
    kubernetes: Option<&str>,
) -> Result<Plan<'a>> {
    let (version, module_dir, inputs) = match component.source {
        Source::Wrapper { dir, module } => {
            // The control plane's wrapper is chosen by version; the others are fixed.
            let dir = match component.name {
                "k8s" => k8s_wrapper_dir(kubernetes).map_err(anyhow::Error::msg)?,
                _ => dir.to_string(),
            };
            let module_dir = root.join(dir);
            let gomod = read(&module_dir.join("go.mod"))?;
            let version = module_version(&gomod, module).with_context(|| {
                format!("{}/go.mod does not require {module}", module_dir.display())
            })?;
            let gosum = read(&module_dir.join("go.sum"))?;
            let mut inputs = vec![gomod.into_bytes(), gosum.into_bytes()];
            // A wrapper with Go source of our own (the registrar) is keyed by it too; the
            // pure wrappers' keys stay as they were.
            inputs.extend(own_go_sources(&module_dir)?);
            (version, Some(module_dir), inputs)
        }
        Source::ThirdParty { dir, version } => {
            let module_dir = root.join(dir);
            third_party_present(component.name, &module_dir, version)?;
            let gomod = read(&module_dir.join("go.mod"))?;
            let gosum = read(&module_dir.join("go.sum"))?;
            let tree = tree_digest(&module_dir)?;
            let inputs = vec![gomod.into_bytes(), gosum.into_bytes(), tree];
            (version.to_string(), Some(module_dir), inputs)
        }
        // A proxy module's content is fixed by its version (the checksum database guarantees
        // it), so the recipe, which names module and version, is the whole key: nothing is
        // downloaded until a build is needed.
        Source::ProxyModule { version, .. } => (version.to_string(), None, Vec::new()),
    };
    let ldflags = ldflags(component.name, &version);
    let recipe = recipe(component, &ldflags);
    let mut key_inputs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    // After go.mod and go.sum, before the tree: the order the keys were always made in.
    key_inputs.insert(key_inputs.len().min(2), recipe.as_bytes());
    let key = cache_key(component.name, &version, go, &key_inputs);
    Ok(Plan {
        component,
        version,
        dir: bins.join(key),
        ldflags,
        module_dir,
    })
}

/// The `.go` files of a wrapper directory other than `tools.go`, by name, as key inputs.
fn own_go_sources(dir: &Path) -> Result<Vec<Vec<u8>>> {
    let mut names: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|e| e == "go")
                && p.file_name().is_some_and(|n| n != "tools.go")
        })
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| {
            let mut input = p
                .file_name()
                .unwrap_or_default()
                .as_encoded_bytes()
                .to_vec();
            input.push(0);
            input.extend(fs::read(p).with_context(|| format!("reading {}", p.display()))?);
            Ok(input)
        })
        .collect()
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
    copy_module_files(plan.component, cache, &tmp)?;
    for file in &outs {
        if !tmp.join(file).exists() {
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
    // Anything but a wrapper builds in a writable copy beside the output, removed afterwards.
    let (workdir, copied) = match (&c.source, &plan.module_dir) {
        (Source::Wrapper { .. }, Some(dir)) => (dir.clone(), false),
        (Source::ThirdParty { .. }, Some(dir)) => {
            let copy = out.join("src");
            copy_tree(dir, &copy)?;
            (copy, true)
        }
        (
            Source::ProxyModule {
                module,
                version,
                replace,
            },
            _,
        ) => {
            let downloaded = download_module(cache, module, version, out)?;
            let copy = out.join("src");
            copy_tree(&downloaded, &copy)?;
            let gomod_path = copy.join("go.mod");
            let gomod = rewrite_replaces(&read(&gomod_path)?, replace)
                .map_err(|e| anyhow::anyhow!("{module}@{version}: {e}"))?;
            fs::write(&gomod_path, gomod)
                .with_context(|| format!("writing {}", gomod_path.display()))?;
            (copy, true)
        }
        (_, None) => bail!("{}: no module directory", c.name),
    };
    let target = if c.packages.len() == 1 {
        out.join(c.outputs[0].1)
    } else {
        // `-o dir/` with several main packages writes one binary per package.
        PathBuf::from(format!("{}/", out.display()))
    };
    let env = go_env(cache);
    let mut args: Vec<String> = if c.test_binary {
        vec!["test".into(), "-c".into()]
    } else {
        vec!["build".into(), "-tags=notest".into()]
    };
    // The rewritten go.mod needs go.sum lines for the new replacement targets.
    if matches!(c.source, Source::ProxyModule { .. }) {
        args.push("-mod=mod".into());
    }
    args.extend([
        "-pgo=off".into(),
        "-ldflags".into(),
        plan.ldflags.clone(),
        "-o".into(),
        target.display().to_string(),
    ]);
    args.extend(c.packages.iter().map(|p| p.to_string()));
    let shown = format!(
        "cd {} && {} go {}",
        workdir.display(),
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
        .current_dir(&workdir)
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
    if copied {
        fs::remove_dir_all(&workdir).with_context(|| format!("removing {}", workdir.display()))?;
    }
    Ok(())
}

/// The environment of every go command: the local toolchain only, no cgo, no workspace, and
/// the module and build caches shared by all checkouts.
fn go_env(cache: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("GOTOOLCHAIN", "local".into()),
        ("CGO_ENABLED", "0".into()),
        ("GOWORK", "off".into()),
        ("GOFLAGS", "-trimpath".into()),
        ("GOMODCACHE", cache.join("gomod").display().to_string()),
        ("GOCACHE", cache.join("gocache").display().to_string()),
    ]
}

/// `go mod download -json module@version` (run in `cwd`, outside any module): the read-only
/// directory the module was extracted to.
fn download_module(cache: &Path, module: &str, version: &str, cwd: &Path) -> Result<PathBuf> {
    let shown = format!("go mod download -json {module}@{version}");
    let out = Command::new("go")
        .args(["mod", "download", "-json", &format!("{module}@{version}")])
        .envs(go_env(cache))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {shown}"))?;
    // On failure go still prints the JSON, with an "Error" field.
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    if let Some(e) = info["Error"].as_str() {
        bail!("{shown}: {e}");
    }
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    match info["Dir"].as_str() {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => bail!(
            "{shown}: no Dir in its output: {}",
            String::from_utf8_lossy(&out.stdout)
        ),
    }
}

/// Copies each of the component's module files into `<out>/<dest>/`.
fn copy_module_files(c: &Component, cache: &Path, out: &Path) -> Result<()> {
    for f in c.files {
        let from = download_module(cache, f.module, f.version, out)?.join(f.dir);
        let to = out.join(f.dest);
        fs::create_dir_all(&to).with_context(|| format!("creating {}", to.display()))?;
        for name in f.names {
            // Written fresh, not copied, so the cache gets writable files (module files are
            // read-only, which would make the cache entry hard to remove).
            let text = fs::read(from.join(name))
                .with_context(|| format!("reading {}", from.join(name).display()))?;
            fs::write(to.join(name), text)
                .with_context(|| format!("writing {}", to.join(name).display()))?;
        }
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
