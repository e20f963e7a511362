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
}

impl Source {
    /// The directory, relative to the workspace root.
    pub fn dir(&self) -> &'static str {
        match self {
            Source::Wrapper { dir, .. } | Source::ThirdParty { dir, .. } => dir,
        }
    }
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
    },
];

/// The csi-driver-host-path source, relative to the workspace root (outside the repository).
pub const HOSTPATH_DIR: &str = "../shared/third_party/csi-driver-host-path";

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
}
