//! `csi-provisioner admission-policy --driver-name NAME [--volume-name-prefix P]
//! [--volume-name-uuid-length N] [--output yaml|json]`: prints the MutatingAdmissionPolicy and
//! its binding that keep our creating-volume finalizer on the API server's side
//! (`provisioning::admission`), ready for `kubectl apply -f -`. The naming flags must be the
//! provisioner's: the policy drops the finalizer when a claim is bound to the PV named so.

use provisioning::admission::VolumeNaming;
use provisioning::volume_name::validate_flags;

/// The subcommand's name, the first argument.
pub const SUBCOMMAND: &str = "admission-policy";

/// How to print the two objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Two YAML documents.
    Yaml,
    /// A `v1` `List` holding both.
    Json,
}

/// The subcommand's arguments.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Args {
    /// The CSI driver name GetPluginInfo reports
    #[arg(long = "driver-name", value_name = "NAME", required = true, allow_hyphen_values = true,
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub driver: String,
    /// The provisioner's --volume-name-prefix
    #[arg(long, value_name = "PREFIX", allow_hyphen_values = true,
          default_value = VolumeNaming::DEFAULT.prefix, value_parser = prefix)]
    pub volume_name_prefix: String,
    /// The provisioner's --volume-name-uuid-length
    #[arg(long, value_name = "N", allow_hyphen_values = true,
          default_value_t = VolumeNaming::DEFAULT.uuid_length, value_parser = uuid_length)]
    pub volume_name_uuid_length: i32,
    /// How to print the policy and its binding
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Yaml)]
    pub output: Output,
}

/// A `--volume-name-prefix` the provisioner accepts.
fn prefix(raw: &str) -> Result<String, String> {
    validate_flags(raw, VolumeNaming::DEFAULT.uuid_length).map_err(|e| e.to_string())?;
    Ok(raw.to_string())
}

/// A `--volume-name-uuid-length` the provisioner accepts.
fn uuid_length(raw: &str) -> Result<i32, String> {
    let n = raw
        .parse()
        .map_err(|_| "not an integer: give -1 or 1 to 32".to_string())?;
    validate_flags(VolumeNaming::DEFAULT.prefix, n).map_err(|e| e.to_string())?;
    Ok(n)
}

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

    fn parse(words: &[&str]) -> Result<Args, String> {
        let line = [&[SUBCOMMAND], words].concat();
        match crate::subcommand::tests::parse_words(&line) {
            Some(Ok(crate::subcommand::Subcommand::AdmissionPolicy(args))) => Ok(args),
            Some(Err(err)) => Err(err.to_string()),
            other => panic!("{words:?}: {other:?}"),
        }
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
        let cases: [(&[&str], Result<Args, &str>); 14] = [
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
                &["--driver-name=x", "--volume-name-uuid-length", "-1"],
                ok("x", Output::Yaml),
            ),
            (
                &["--driver-name=x", "--volume-name-uuid-length=many"],
                Err("invalid value 'many' for '--volume-name-uuid-length <N>': not an integer"),
            ),
            (
                &["--driver-name=x", "--volume-name-uuid-length=0"],
                Err("invalid value '0' for '--volume-name-uuid-length <N>'"),
            ),
            (
                &["--driver-name=x", "--volume-name-prefix="],
                Err("invalid value '' for '--volume-name-prefix <PREFIX>'"),
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
            (&["-o=json", "--driver-name", "x"], ok("x", Output::Json)),
            // The last of a repeated flag wins.
            (
                &[
                    "--driver-name=a",
                    "--driver-name=x",
                    "-o",
                    "json",
                    "-o",
                    "yaml",
                ],
                ok("x", Output::Yaml),
            ),
            (
                &[],
                Err("the following required arguments were not provided"),
            ),
            (
                &["--driver-name"],
                Err("a value is required for '--driver-name <NAME>'"),
            ),
            (
                &["--driver-name=x", "--output=xml"],
                Err("invalid value 'xml' for '--output <OUTPUT>'"),
            ),
            (
                &["--driver", "x"],
                Err("unexpected argument '--driver' found"),
            ),
        ];
        for (input, want) in cases {
            let got = parse(input);
            match want {
                Ok(w) => assert_eq!(got, Ok(w), "{input:?}"),
                Err(says) => {
                    let message = got.expect_err("refused");
                    assert!(message.contains(says), "{input:?}: {message}");
                    assert!(message.contains("try '--help'"), "{message}");
                }
            }
        }
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
