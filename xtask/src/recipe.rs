//! What to build for each Go component, and the cache key of a build (pure).

/// One Go component: where its source comes from and what to build from it.
pub struct Component {
    pub name: &'static str,
    pub source: Source,
    /// Package paths (wrappers) or `./`-relative packages (third-party source).
    pub packages: &'static [&'static str],
    /// (name in `testenv-bin`, file name in the cache directory).
    pub outputs: &'static [(&'static str, &'static str)],
    /// Built only when asked (`--with-upstream`).
    pub optional: bool,
    /// Built with `go test -c` (the e2e suite is a test binary); one package only.
    pub test_binary: bool,
    /// Non-Go files the tests need, copied from proxy modules into the cache directory.
    pub files: &'static [ModuleFiles],
}

/// Files copied verbatim from a module served by the Go module proxy into `<cache dir>/<dest>/`
/// (e.g. the CRDs a controller expects installed).
pub struct ModuleFiles {
    pub module: &'static str,
    pub version: &'static str,
    /// Folder inside the module.
    pub dir: &'static str,
    pub names: &'static [&'static str],
    /// Folder inside the cache directory; name it in `outputs` to link it into `testenv-bin`.
    pub dest: &'static str,
}

/// Where a component's Go source comes from.
pub enum Source {
    /// A committed wrapper module (go.mod + go.sum, no sources) under `tools/testenv/`,
    /// requiring `module` at the version that names the build.
    Wrapper {
        dir: &'static str,
        module: &'static str,
    },
    /// Unmodified third-party source outside the repository (the main module itself), for
    /// modules the proxy refuses; built from a writable copy. `dir` is relative to the
    /// workspace root and `version` is the tag its ORIGIN.md names.
    ThirdParty {
        dir: &'static str,
        version: &'static str,
    },
    /// A module the Go module proxy serves, built as the main module from a writable copy of
    /// its download whose `replace` directives for the listed modules get new right-hand
    /// sides (module zips lack nested modules that `=> ./dir` replaces point at).
    ProxyModule {
        module: &'static str,
        version: &'static str,
        /// (replaced module path, new right-hand side).
        replace: &'static [(&'static str, &'static str)],
    },
}

pub const COMPONENTS: &[Component] = &[
    Component {
        name: "k8s",
        source: Source::Wrapper {
            dir: "tools/testenv/k8s",
            module: "k8s.io/kubernetes",
        },
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
        test_binary: false,
        files: &[],
    },
    // kubectl as users run it: `kubectl apply`'s three-way merge reads the last-applied
    // annotation our claim writes must keep. Its own wrapper module, so that adding it did
    // not change the control plane's cache key.
    Component {
        name: "kubectl",
        source: Source::Wrapper {
            dir: "tools/testenv/kubectl",
            module: "k8s.io/kubernetes",
        },
        packages: &["k8s.io/kubernetes/cmd/kubectl"],
        outputs: &[("kubectl", "kubectl")],
        optional: false,
        test_binary: false,
        files: &[],
    },
    // kubelet for the one real node (`--real-node`, `cargo xtask node`): its own wrapper, so
    // the control plane's cache key did not change when it came.
    Component {
        name: "kubelet",
        source: Source::Wrapper {
            dir: "tools/testenv/kubelet",
            module: "k8s.io/kubernetes",
        },
        packages: &["k8s.io/kubernetes/cmd/kubelet"],
        outputs: &[("kubelet", "kubelet")],
        optional: false,
        test_binary: false,
        files: &[],
    },
    // Our own registrar (Go: kubelet sends its socket path as the HTTP/2 authority, which the
    // Rust HTTP/2 server refuses); k8s.io/kubelet's version names the build.
    Component {
        name: "node-registrar",
        source: Source::Wrapper {
            dir: "tools/testenv/registrar",
            module: "k8s.io/kubelet",
        },
        packages: &["."],
        outputs: &[("node-registrar", "node-registrar")],
        optional: false,
        test_binary: false,
        files: &[],
    },
    // Kubernetes' e2e suite and its agnhost image, for `cargo xtask e2e` only (optional).
    Component {
        name: "e2e",
        source: Source::Wrapper {
            dir: "tools/testenv/e2e",
            module: "k8s.io/kubernetes",
        },
        packages: &["k8s.io/kubernetes/test/e2e"],
        outputs: &[("e2e.test", "e2e.test")],
        optional: true,
        test_binary: true,
        files: &[],
    },
    Component {
        name: "agnhost",
        source: Source::Wrapper {
            dir: "tools/testenv/agnhost",
            module: "k8s.io/kubernetes",
        },
        packages: &["k8s.io/kubernetes/test/images/agnhost"],
        outputs: &[("agnhost", "agnhost")],
        optional: true,
        test_binary: false,
        files: &[],
    },
    Component {
        name: "csi-sanity",
        source: Source::Wrapper {
            dir: "tools/testenv/csi-test",
            module: "github.com/kubernetes-csi/csi-test/v5",
        },
        packages: &["github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity"],
        outputs: &[("csi-sanity", "csi-sanity")],
        optional: false,
        test_binary: false,
        files: &[],
    },
    Component {
        name: "external-provisioner",
        source: Source::Wrapper {
            dir: "tools/testenv/external-provisioner",
            module: "github.com/kubernetes-csi/external-provisioner/v6",
        },
        packages: &["github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"],
        outputs: &[("csi-provisioner-upstream", "csi-provisioner")],
        optional: true,
        test_binary: false,
        files: &[],
    },
    Component {
        name: "csi-driver-host-path",
        source: Source::ThirdParty {
            dir: HOSTPATH_DIR,
            version: "v1.18.0",
        },
        packages: &["./cmd/hostpathplugin"],
        outputs: &[("hostpathplugin", "hostpathplugin")],
        optional: false,
        test_binary: false,
        files: &[],
    },
    Component {
        name: "external-snapshotter",
        source: Source::ProxyModule {
            module: "github.com/kubernetes-csi/external-snapshotter/v8",
            version: SNAPSHOTTER_VERSION,
            // Upstream builds against its in-repo client module, which is not in the zip; the
            // published client of the same tag is that code.
            replace: &[(
                SNAPSHOT_CLIENT_MODULE,
                "github.com/kubernetes-csi/external-snapshotter/client/v8 v8.7.0",
            )],
        },
        packages: &["./cmd/snapshot-controller", "./cmd/csi-snapshotter"],
        outputs: &[
            ("snapshot-controller", "snapshot-controller"),
            ("csi-snapshotter", "csi-snapshotter"),
            ("snapshot-crd", "crd"),
            ("gateway-crd", "gateway-crd"),
        ],
        optional: false,
        test_binary: false,
        files: &[
            ModuleFiles {
                module: SNAPSHOT_CLIENT_MODULE,
                version: SNAPSHOTTER_VERSION,
                dir: "config/crd",
                names: &[
                    "snapshot.storage.k8s.io_volumesnapshotclasses.yaml",
                    "snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
                    "snapshot.storage.k8s.io_volumesnapshots.yaml",
                ],
                dest: "crd",
            },
            // ReferenceGrant (gateway.networking.k8s.io/v1beta1), which allows cross-namespace
            // data sources; a CRD only, nothing of Gateway API runs.
            ModuleFiles {
                module: "sigs.k8s.io/gateway-api",
                version: "v1.2.1",
                dir: "config/crd/standard",
                names: &["gateway.networking.k8s.io_referencegrants.yaml"],
                dest: "gateway-crd",
            },
        ],
    },
];

const SNAPSHOTTER_VERSION: &str = "v8.7.0";
const SNAPSHOT_CLIENT_MODULE: &str = "github.com/kubernetes-csi/external-snapshotter/client/v8";

/// The csi-driver-host-path source, relative to the workspace root (outside the repository).
pub const HOSTPATH_DIR: &str = "../shared/third_party/csi-driver-host-path";

/// The control plane `cargo xtask test` runs by default: the newest Kubernetes minor the Go
/// module proxy serves, built from the wrapper `tools/testenv/k8s`.
pub const DEFAULT_KUBERNETES: &str = "1.37";

/// Older minors `--kubernetes` can pick (upstream v6.x supports 1.34 and later), each a
/// committed wrapper module `tools/testenv/k8s-<minor>` on that minor's newest patch.
pub const OLDER_KUBERNETES: &[&str] = &["1.34", "1.35", "1.36"];

/// The minor `--kubernetes VERSION` asks for when it is not the default (`None`: the default,
/// asked or not). `VERSION` is a minor (`1.34`), with or without a leading `v` or a patch.
pub fn other_kubernetes(version: Option<&str>) -> Result<Option<String>, String> {
    let Some(asked) = version else {
        return Ok(None);
    };
    let minor: String = asked
        .trim_start_matches('v')
        .split('.')
        .take(2)
        .collect::<Vec<_>>()
        .join(".");
    if minor == DEFAULT_KUBERNETES {
        return Ok(None);
    }
    if OLDER_KUBERNETES.contains(&minor.as_str()) {
        return Ok(Some(minor));
    }
    Err(format!(
        "--kubernetes {asked}: not a version the test environment builds; choose one of {}, {DEFAULT_KUBERNETES} (the default)",
        OLDER_KUBERNETES.join(", ")
    ))
}

/// The wrapper directory of the control plane for `--kubernetes VERSION` (`None`: the
/// default); see [`other_kubernetes`].
pub fn k8s_wrapper_dir(version: Option<&str>) -> Result<String, String> {
    Ok(match other_kubernetes(version)? {
        None => "tools/testenv/k8s".into(),
        Some(minor) => format!("tools/testenv/k8s-{minor}"),
    })
}

/// Linker flags: stripped, with the version each upstream build stamps in.
pub fn ldflags(component: &str, version: &str) -> String {
    let mut flags = String::from("-s -w");
    match component {
        "k8s" | "kubectl" | "kubelet" | "e2e" | "agnhost" => {
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

/// `gomod` with the right-hand side of each `replace` directive for a listed module (single-line
/// or block form, with or without a version on the left) set to the new one. Every listed
/// module must have a directive: a version bump that drops one should fail, not build
/// something else.
pub fn rewrite_replaces(gomod: &str, replace: &[(&str, &str)]) -> Result<String, String> {
    let mut found = vec![false; replace.len()];
    let mut in_block = false;
    let mut out = String::with_capacity(gomod.len());
    for line in gomod.lines() {
        let code = line.split("//").next().unwrap_or("").trim();
        let directive = if in_block {
            if code == ")" {
                in_block = false;
                None
            } else {
                Some(code)
            }
        } else if code.strip_prefix("replace").map(str::trim) == Some("(") {
            in_block = true;
            None
        } else {
            code.strip_prefix("replace")
                .filter(|rest| rest.starts_with(char::is_whitespace))
        };
        let mut rewritten = None;
        if let Some((lhs, _)) = directive.and_then(|d| d.split_once("=>")) {
            let path = lhs.split_whitespace().next();
            if let Some(i) = replace.iter().position(|(m, _)| Some(*m) == path) {
                found[i] = true;
                let lead = if in_block { "\t" } else { "replace " };
                rewritten = Some(format!("{lead}{} => {}", lhs.trim(), replace[i].1));
            }
        }
        out.push_str(rewritten.as_deref().unwrap_or(line));
        out.push('\n');
    }
    let missing: Vec<&str> = replace
        .iter()
        .zip(&found)
        .filter(|(_, f)| !**f)
        .map(|((m, _), _)| *m)
        .collect();
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(format!("go.mod has no replace directive for {missing:?}"))
    }
}

/// The build recipe hashed into a component's cache key. Only proxy modules and copied files
/// add to the original form, so the other components keep their warm cache entries.
pub fn recipe(component: &Component, ldflags: &str) -> String {
    let mut recipe = if component.test_binary {
        format!("{:?} {ldflags} test -c -pgo=off", component.packages)
    } else {
        format!("{:?} {ldflags} -tags=notest -pgo=off", component.packages)
    };
    if let Source::ProxyModule {
        module,
        version,
        replace,
    } = component.source
    {
        recipe.push_str(&format!(" -mod=mod {module}@{version} replace {replace:?}"));
    }
    for f in component.files {
        recipe.push_str(&format!(
            " files {}@{}/{} {:?} -> {}",
            f.module, f.version, f.dir, f.names, f.dest
        ));
    }
    recipe
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

#[cfg(test)]
mod tests {
    #[test]
    fn kubernetes_versions_pick_their_wrapper() {
        let cases = [
            (None, Ok("tools/testenv/k8s")),
            (Some("1.37"), Ok("tools/testenv/k8s")),
            (Some("v1.34"), Ok("tools/testenv/k8s-1.34")),
            (Some("1.35.4"), Ok("tools/testenv/k8s-1.35")),
            (Some("1.36"), Ok("tools/testenv/k8s-1.36")),
            (Some("1.33"), Err(())),
            (Some("banana"), Err(())),
        ];
        for (asked, want) in cases {
            let got = super::k8s_wrapper_dir(asked);
            match want {
                Ok(dir) => assert_eq!(got.as_deref(), Ok(dir), "{asked:?}"),
                Err(()) => {
                    let e = got.expect_err("refused");
                    assert!(e.contains("1.34, 1.35, 1.36, 1.37"), "{e}");
                }
            }
        }
    }

    use super::*;

    #[test]
    fn other_kubernetes_names_a_minor_or_the_default() {
        assert_eq!(other_kubernetes(None), Ok(None));
        assert_eq!(other_kubernetes(Some("v1.37.2")), Ok(None));
        assert_eq!(other_kubernetes(Some("1.34")), Ok(Some("1.34".into())));
        assert_eq!(other_kubernetes(Some("v1.35.4")), Ok(Some("1.35".into())));
        assert!(other_kubernetes(Some("1.33")).is_err());
    }

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
            ("k8s", "v1.37.2"),
            ("kubectl", "v1.37.2"),
            ("kubelet", "v1.37.2"),
            ("node-registrar", "v0.37.2"),
            ("csi-sanity", "v5.5.0"),
            ("external-provisioner", "v6.4.0"),
        ];
        for (name, version) in want {
            let c = COMPONENTS.iter().find(|c| c.name == name).expect(name);
            let Source::Wrapper { dir, module } = c.source else {
                panic!("{name} is not a wrapper");
            };
            let gomod = std::fs::read_to_string(root.join(dir).join("go.mod")).expect("go.mod");
            assert_eq!(
                module_version(&gomod, module).as_deref(),
                Some(version),
                "{name}"
            );
        }
    }

    /// Each `--kubernetes` minor has its wrapper, on that minor's newest patch the proxy serves.
    #[test]
    fn older_kubernetes_wrappers_pin_their_minor() {
        let root = testenv::workspace_root();
        let want = [
            ("1.34", "v1.34.4"),
            ("1.35", "v1.35.4"),
            ("1.36", "v1.36.3"),
        ];
        assert_eq!(
            OLDER_KUBERNETES,
            want.iter().map(|(m, _)| *m).collect::<Vec<_>>()
        );
        for (minor, version) in want {
            let dir = k8s_wrapper_dir(Some(minor)).expect(minor);
            let gomod = std::fs::read_to_string(root.join(dir).join("go.mod")).expect("go.mod");
            assert_eq!(
                module_version(&gomod, "k8s.io/kubernetes").as_deref(),
                Some(version),
                "{minor}"
            );
            let staging = format!("k8s.io/api => k8s.io/api v0.{}", &version[3..]);
            assert!(gomod.contains(&staging), "{minor}: {staging}");
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
            ldflags("external-provisioner", "v6.4.0"),
            "-s -w -X main.version=v6.4.0"
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
    fn replace_directives_are_rewritten() {
        let client = "github.com/x/client/v8";
        let to = "github.com/x/client/v8 v8.7.0";
        let cases: &[(&str, &str)] = &[
            (
                "module m\n\nreplace github.com/x/client/v8 => ./client\n\nreplace k8s.io/a => k8s.io/a v0.37.0\n",
                "module m\n\nreplace github.com/x/client/v8 => github.com/x/client/v8 v8.7.0\n\nreplace k8s.io/a => k8s.io/a v0.37.0\n",
            ),
            (
                "replace (\n\tk8s.io/a => k8s.io/a v0.37.0\n\tgithub.com/x/client/v8 v8.0.0 => ../client // local\n)\n",
                "replace (\n\tk8s.io/a => k8s.io/a v0.37.0\n\tgithub.com/x/client/v8 v8.0.0 => github.com/x/client/v8 v8.7.0\n)\n",
            ),
        ];
        for (gomod, want) in cases {
            assert_eq!(rewrite_replaces(gomod, &[(client, to)]).unwrap(), *want);
        }
        // A require line or a longer module path is not the directive.
        let gomod =
            "require github.com/x/client/v8 v8.7.0\nreplace github.com/x/client/v8/sub => ./sub\n";
        let err = rewrite_replaces(gomod, &[(client, to)]).unwrap_err();
        assert!(err.contains(client), "{err}");
    }

    #[test]
    fn snapshotter_builds_against_the_client_of_its_own_tag() {
        let c = COMPONENTS
            .iter()
            .find(|c| c.name == "external-snapshotter")
            .expect("component");
        let Source::ProxyModule {
            version, replace, ..
        } = c.source
        else {
            panic!("not a proxy module");
        };
        assert_eq!(
            replace,
            &[(
                SNAPSHOT_CLIENT_MODULE,
                &*format!("{SNAPSHOT_CLIENT_MODULE} {version}")
            )]
        );
        // The snapshot CRDs come from the client of the same tag.
        assert!(
            c.files
                .iter()
                .filter(|f| f.module == SNAPSHOT_CLIENT_MODULE)
                .all(|f| f.version == version)
        );
        // Every copied folder is linked into testenv-bin.
        for f in c.files {
            assert!(
                c.outputs.iter().any(|(_, file)| *file == f.dest),
                "{}",
                f.dest
            );
        }
    }

    #[test]
    fn recipes_of_existing_components_are_unchanged() {
        let c = COMPONENTS.iter().find(|c| c.name == "csi-sanity").unwrap();
        assert_eq!(
            recipe(c, &ldflags("csi-sanity", "v5.5.0")),
            r#"["github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity"] -s -w -X main.VERSION=v5.5.0 -tags=notest -pgo=off"#
        );
    }

    #[test]
    fn proxy_module_keys_follow_replaces_and_files() {
        fn component(
            replace: &'static [(&'static str, &'static str)],
            files: &'static [ModuleFiles],
        ) -> Component {
            Component {
                name: "snap",
                source: Source::ProxyModule {
                    module: "example.com/snap",
                    version: "v1.0.0",
                    replace,
                },
                packages: &["./cmd/a"],
                outputs: &[("a", "a")],
                optional: false,
                test_binary: false,
                files,
            }
        }
        let key = |c: &Component| {
            let r = recipe(c, "-s -w");
            cache_key(c.name, "v1.0.0", "go1.26.8", &[r.as_bytes()])
        };
        const CRD: &[ModuleFiles] = &[ModuleFiles {
            module: "example.com/client",
            version: "v1.0.0",
            dir: "crd",
            names: &["a.yaml"],
            dest: "crd",
        }];
        let base = key(&component(
            &[("example.com/c", "example.com/c v1.0.0")],
            CRD,
        ));
        let variants = [
            key(&component(
                &[("example.com/c", "example.com/c v1.0.1")],
                CRD,
            )),
            key(&component(&[], CRD)),
            key(&component(
                &[("example.com/c", "example.com/c v1.0.0")],
                &[],
            )),
        ];
        for v in variants {
            assert_ne!(v, base);
        }
        assert!(recipe(&component(&[], &[]), "").contains("example.com/snap@v1.0.0"));
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
}
