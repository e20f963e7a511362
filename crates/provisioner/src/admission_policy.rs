//! `csi-provisioner admission-policy --driver-name NAME [--volume-name-prefix P]
//! [--volume-name-uuid-length N] [--output yaml|json]`: prints the MutatingAdmissionPolicy and
//! its binding that keep our creating-volume finalizer on the API server's side
//! (`provisioning::admission`), ready for `kubectl apply -f -`. The naming flags must be the
//! provisioner's: the policy drops the finalizer when a claim is bound to the PV named so.

/// The subcommand's name, the first argument.
pub const SUBCOMMAND: &str = "admission-policy";

const USAGE: &str = "usage: csi-provisioner admission-policy --driver-name NAME [--volume-name-prefix PREFIX] [--volume-name-uuid-length N] [--output yaml|json]";

/// How to print the two objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Two YAML documents.
    Yaml,
    /// A `v1` `List` holding both.
    Json,
}

/// The subcommand's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub driver: String,
    /// The provisioner's `--volume-name-prefix` (default `pvc`).
    pub volume_name_prefix: String,
    /// The provisioner's `--volume-name-uuid-length` (default -1).
    pub volume_name_uuid_length: i32,
    pub output: Output,
}

/// Why the arguments were refused (exit status 2, as for a bad flag).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}\n{USAGE}")]
pub struct UsageError(String);

/// The API resource of the MutatingAdmissionPolicy (`binding: false`) or of its binding.
pub fn api_resource(binding: bool) -> kube::api::ApiResource {
    use provisioning::admission::{BINDING, POLICY};
    let (kind, plural) = if binding { BINDING } else { POLICY };
    kube::api::ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: provisioning::admission::API_VERSION.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Whether the command line asks for this subcommand.
pub fn requested(args: &[String]) -> bool {
    crate::subcommand::requested(args, SUBCOMMAND)
}

/// Parses the arguments after the subcommand: `--flag value` and `--flag=value`.
pub fn parse(args: &[String]) -> Result<Args, UsageError> {
    let mut driver = None;
    let mut output = Output::Yaml;
    let mut prefix = provisioning::admission::VolumeNaming::DEFAULT
        .prefix
        .to_string();
    let mut uuid_length = provisioning::admission::VolumeNaming::DEFAULT.uuid_length;
    let mut walk = crate::subcommand::Walk::new(args);
    while let Some((flag, inline)) = walk.next_arg() {
        let mut value = || walk.value(flag, inline).map_err(UsageError);
        match flag {
            "--driver-name" => driver = Some(value()?),
            "--volume-name-prefix" => prefix = value()?,
            "--volume-name-uuid-length" => {
                let raw = value()?;
                uuid_length = raw.parse().map_err(|_| {
                    UsageError(format!("invalid --volume-name-uuid-length {raw:?}"))
                })?;
            }
            "--output" | "-o" => {
                output = match value()?.as_str() {
                    "yaml" => Output::Yaml,
                    "json" => Output::Json,
                    other => {
                        return Err(UsageError(format!(
                            "invalid --output {other:?}: use yaml or json"
                        )));
                    }
                }
            }
            other => return Err(UsageError(format!("unknown flag: {other}"))),
        }
    }
    provisioning::volume_name::validate_flags(&prefix, uuid_length)
        .map_err(|e| UsageError(e.to_string()))?;
    match driver {
        Some(d) if !d.is_empty() => Ok(Args {
            driver: d,
            volume_name_prefix: prefix,
            volume_name_uuid_length: uuid_length,
            output,
        }),
        _ => Err(UsageError(
            "--driver-name is required: the CSI driver name GetPluginInfo reports".into(),
        )),
    }
}

/// The policy and binding as text.
pub fn render(args: &Args) -> String {
    let objects = [
        provisioning::admission::policy(
            &args.driver,
            provisioning::admission::VolumeNaming {
                prefix: &args.volume_name_prefix,
                uuid_length: args.volume_name_uuid_length,
            },
        ),
        provisioning::admission::binding(&args.driver),
    ];
    match args.output {
        Output::Json => {
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
            // Serialising a `Value` cannot fail.
            serde_json::to_string_pretty(&list).unwrap_or_default() + "\n"
        }
        Output::Yaml => objects
            .iter()
            .map(|o| serde_yaml::to_string(o).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("---\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parse_table() {
        let ok = |driver: &str, output| {
            Ok(Args {
                driver: driver.into(),
                volume_name_prefix: "pvc".into(),
                volume_name_uuid_length: -1,
                output,
            })
        };
        let named = Args {
            volume_name_prefix: "vol".into(),
            volume_name_uuid_length: 8,
            ..ok("x", Output::Yaml).unwrap()
        };
        let cases: [(&[&str], Result<Args, &str>); 10] = [
            (
                &[
                    "--driver-name=x",
                    "--volume-name-prefix=vol",
                    "--volume-name-uuid-length",
                    "8",
                ],
                Ok(named),
            ),
            (
                &["--driver-name=x", "--volume-name-uuid-length=many"],
                Err("invalid --volume-name-uuid-length \"many\""),
            ),
            (
                &["--driver-name=x", "--volume-name-uuid-length=0"],
                Err("--volume-name-uuid-length"),
            ),
            (
                &["--driver-name", "d.example"],
                ok("d.example", Output::Yaml),
            ),
            (
                &["--driver-name=d.example", "--output=json"],
                ok("d.example", Output::Json),
            ),
            (&["-o", "yaml", "--driver-name", "x"], ok("x", Output::Yaml)),
            (&[], Err("--driver-name is required")),
            (
                &["--driver-name"],
                Err("flag needs an argument: --driver-name"),
            ),
            (
                &["--driver-name=x", "--output=xml"],
                Err("invalid --output \"xml\""),
            ),
            (&["--driver", "x"], Err("unknown flag: --driver")),
        ];
        for (input, want) in cases {
            let got = parse(&args(input));
            match want {
                Ok(w) => assert_eq!(got, Ok(w), "{input:?}"),
                Err(prefix) => {
                    let message = got.expect_err("refused").to_string();
                    assert!(message.starts_with(prefix), "{input:?}: {message}");
                    assert!(message.ends_with(USAGE), "{message}");
                }
            }
        }
        assert!(requested(&args(&["csi-provisioner", "admission-policy"])));
        assert!(!requested(&args(&["csi-provisioner", "--v=5"])));
    }

    /// The shipped example is what the subcommand prints for hostpath.csi.k8s.io.
    #[test]
    fn the_shipped_manifest_is_current() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/kubernetes/admission-policy.yaml"
        );
        let shipped =
            std::fs::read_to_string(path).expect("deploy/kubernetes/admission-policy.yaml");
        let body: String = shipped
            .lines()
            .skip_while(|l| l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        let rendered = render(&Args {
            driver: "hostpath.csi.k8s.io".into(),
            volume_name_prefix: "pvc".into(),
            volume_name_uuid_length: -1,
            output: Output::Yaml,
        });
        assert_eq!(
            body, rendered,
            "re-render it: csi-provisioner admission-policy --driver-name hostpath.csi.k8s.io"
        );
    }

    #[test]
    fn both_outputs_hold_the_policy_and_its_binding() {
        let a = |output| Args {
            driver: "d.example".into(),
            volume_name_prefix: "pvc".into(),
            volume_name_uuid_length: -1,
            output,
        };
        let list: serde_json::Value = serde_json::from_str(&render(&a(Output::Json))).unwrap();
        let kinds: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]
        );
        let yaml = render(&a(Output::Yaml));
        let docs: Vec<serde_json::Value> = yaml
            .split("---\n")
            .map(|d| serde_yaml::from_str(d).unwrap())
            .collect();
        assert_eq!(docs, list["items"].as_array().unwrap().clone());
    }
}
