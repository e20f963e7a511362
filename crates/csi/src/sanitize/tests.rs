use std::collections::{BTreeSet, HashMap};

use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MapKey, MessageDescriptor, Value};

use super::*;
use crate::v1;

const SECRET_KEY: &str = "secret-key-d41d8c";
const SECRET_VALUE: &str = "secret-value-98f00b";

fn pool() -> &'static DescriptorPool {
    descriptor_pool().expect("checked-in descriptor set decodes")
}

fn secret_ext(pool: &DescriptorPool) -> ExtensionDescriptor {
    pool.get_extension_by_name(SECRET_EXTENSION)
        .expect("csi_secret extension in the pool")
}

fn strings(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn mount_capability(mode: i32) -> v1::VolumeCapability {
    v1::VolumeCapability {
        access_type: Some(v1::volume_capability::AccessType::Mount(
            v1::volume_capability::MountVolume {
                fs_type: "ext4".into(),
                mount_flags: vec!["ro".into(), "noatime".into()],
                volume_mount_group: String::new(),
            },
        )),
        access_mode: Some(v1::volume_capability::AccessMode { mode }),
    }
}

#[test]
fn renders_messages_like_go_protosanitizer() {
    let full = v1::CreateVolumeRequest {
        name: "pvc-1".into(),
        capacity_range: Some(v1::CapacityRange {
            required_bytes: 1024,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![mount_capability(5)],
        parameters: strings(&[("type", "fast"), ("<zone>", "a&b")]),
        secrets: strings(&[(SECRET_KEY, SECRET_VALUE)]),
        volume_content_source: Some(v1::VolumeContentSource { r#type: None }),
        accessibility_requirements: Some(v1::TopologyRequirement {
            requisite: vec![v1::Topology {
                segments: strings(&[("zone", "z1"), ("rack", "r")]),
            }],
            preferred: vec![],
        }),
        mutable_parameters: HashMap::new(),
    };
    let probe_not_ready = v1::ProbeResponse { ready: Some(false) };
    let probe_ready = v1::ProbeResponse { ready: Some(true) };
    let capacity = v1::GetCapacityResponse {
        available_capacity: 10,
        maximum_volume_size: Some(5),
        minimum_volume_size: None,
    };
    let unknown_enum = v1::ControllerGetCapabilitiesResponse {
        capabilities: vec![v1::ControllerServiceCapability {
            r#type: Some(v1::controller_service_capability::Type::Rpc(
                v1::controller_service_capability::Rpc { r#type: 12345 },
            )),
        }],
    };
    let cases: Vec<(String, &str)> = vec![
        (
            sanitize(&v1::CreateVolumeRequest::default()).to_string(),
            "{}",
        ),
        (
            sanitize(&full).to_string(),
            concat!(
                r#"{"accessibility_requirements":{"requisite":[{"segments":{"rack":"r","zone":"z1"}}]},"#,
                r#""capacity_range":{"required_bytes":1024},"name":"pvc-1","#,
                r#""parameters":{"\u003czone\u003e":"a\u0026b","type":"fast"},"secrets":"***stripped***","#,
                r#""volume_capabilities":[{"access_mode":{"mode":"MULTI_NODE_MULTI_WRITER"},"#,
                r#""mount":{"fs_type":"ext4","mount_flags":["ro","noatime"]}}],"volume_content_source":{}}"#
            ),
        ),
        (
            sanitize(&v1::DeleteVolumeRequest {
                volume_id: "v1".into(),
                secrets: HashMap::new(),
            })
            .to_string(),
            r#"{"volume_id":"v1"}"#,
        ),
        (sanitize(&probe_not_ready).to_string(), r#"{"ready":{}}"#),
        (
            sanitize(&probe_ready).to_string(),
            r#"{"ready":{"value":true}}"#,
        ),
        (
            sanitize(&capacity).to_string(),
            r#"{"available_capacity":10,"maximum_volume_size":{"value":5}}"#,
        ),
        (
            sanitize(&unknown_enum).to_string(),
            r#"{"capabilities":[{"rpc":{"type":12345}}]}"#,
        ),
    ];
    for (got, want) in cases {
        assert_eq!(got, want);
    }
}

#[test]
fn debug_formatting_is_sanitised_too() {
    let req = v1::ControllerModifyVolumeRequest {
        volume_id: "v".into(),
        secrets: strings(&[(SECRET_KEY, SECRET_VALUE)]),
        mutable_parameters: HashMap::new(),
    };
    let debug = format!("{:?}", sanitize(&req));
    assert_eq!(debug, sanitize(&req).to_string());
    assert!(
        !debug.contains(SECRET_VALUE) && !debug.contains(SECRET_KEY),
        "{debug}"
    );
}

/// Fills every field of `desc` with a recognisable value; secret fields get the sentinels.
fn populate(desc: &MessageDescriptor, depth: usize) -> DynamicMessage {
    let secret = secret_ext(desc.parent_pool());
    let mut msg = DynamicMessage::new(desc.clone());
    for field in desc.fields() {
        // Only the first member of a oneof, or setting the next one would clear it.
        if field
            .containing_oneof()
            .is_some_and(|o| o.fields().next().as_ref() != Some(&field))
        {
            continue;
        }
        let secret_field = is_secret(&field, Some(&secret));
        let value = if field.is_map() {
            let Kind::Message(entry) = field.kind() else {
                unreachable!("map entry")
            };
            let (key, value) = if secret_field {
                (
                    SECRET_KEY.to_string(),
                    Some(Value::String(SECRET_VALUE.to_string())),
                )
            } else {
                let v = sample(&entry.map_entry_value_field().kind(), field.name(), depth);
                (format!("key-{}", field.name()), v)
            };
            let Some(value) = value else { continue };
            Value::Map(HashMap::from([(MapKey::String(key), value)]))
        } else if secret_field {
            Value::String(SECRET_VALUE.to_string())
        } else {
            let Some(v) = sample(&field.kind(), field.name(), depth) else {
                continue;
            };
            if field.is_list() {
                Value::List(vec![v])
            } else {
                v
            }
        };
        msg.set_field(&field, value);
    }
    msg
}

fn sample(kind: &Kind, name: &str, depth: usize) -> Option<Value> {
    Some(match kind {
        Kind::String => Value::String(format!("visible-{name}")),
        Kind::Bool => Value::Bool(true),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(7),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(7),
        Kind::Uint32 | Kind::Fixed32 => Value::U32(7),
        Kind::Uint64 | Kind::Fixed64 => Value::U64(7),
        Kind::Float => Value::F32(0.5),
        Kind::Double => Value::F64(0.5),
        Kind::Bytes => Value::Bytes(b"visible".to_vec().into()),
        Kind::Enum(_) => Value::EnumNumber(1),
        Kind::Message(m) if depth < 4 => Value::Message(populate(m, depth + 1)),
        Kind::Message(_) => return None,
    })
}

#[test]
fn messages_with_secret_fields_never_show_them() {
    let pool = pool();
    let secret = secret_ext(pool);
    let holders: Vec<MessageDescriptor> = pool
        .all_messages()
        .filter(|m| m.fields().any(|f| is_secret(&f, Some(&secret))))
        .collect();
    assert!(!holders.is_empty(), "csi.proto marks no secret field");
    for desc in holders {
        let msg = populate(&desc, 0);
        let out = sanitize_encoded(desc.full_name(), &msg.encode_to_vec());
        assert!(
            !out.contains(SECRET_VALUE) && !out.contains(SECRET_KEY),
            "{}: {out}",
            desc.full_name()
        );
        for field in desc.fields().filter(|f| msg.has_field(f)) {
            let key = format!("\"{}\":", field.name());
            assert!(
                out.contains(&key),
                "{}: field {} missing in {out}",
                desc.full_name(),
                field.name()
            );
            if is_secret(&field, Some(&secret)) {
                assert!(out.contains(&format!("{key}\"{STRIPPED}\"")), "{out}");
            }
        }
        assert!(
            out.contains("visible-"),
            "{}: non-secret values hidden: {out}",
            desc.full_name()
        );
    }
}

/// Reads `.proto` text: the `Message.field` names whose declaration carries `(csi_secret) = true`.
fn secret_fields_in_proto_source(src: &str) -> BTreeSet<String> {
    let mut scopes: Vec<Option<String>> = Vec::new();
    let mut found = BTreeSet::new();
    for line in src
        .lines()
        .map(|l| l.split("//").next().unwrap_or("").trim())
    {
        if line.ends_with('{') {
            let mut words = line.split_whitespace();
            let scope = match (words.next(), words.next()) {
                (Some("message"), Some(name)) => Some(name.to_string()),
                _ => None,
            };
            scopes.push(scope);
        } else if line.starts_with('}') {
            scopes.pop();
        } else if line.contains("(csi_secret) = true") {
            let path: Vec<&str> = scopes.iter().flatten().map(String::as_str).collect();
            let before_eq = line.split('=').next().unwrap_or("");
            let field = before_eq.split_whitespace().last().unwrap_or("");
            found.insert(format!("csi.v1.{}.{field}", path.join(".")));
        }
    }
    found
}

#[test]
fn secret_fields_are_exactly_those_marked_in_the_proto() {
    let src = include_str!("../../proto/csi.proto");
    let marked = secret_fields_in_proto_source(src);
    let found: BTreeSet<String> = secret_fields().into_iter().collect();
    assert!(
        marked.contains("csi.v1.CreateVolumeRequest.secrets"),
        "parser broken: {marked:?}"
    );
    assert_eq!(found, marked);
}

const NESTED_PROTO: &str = r#"
syntax = "proto3";
package csi.v1;
import "google/protobuf/descriptor.proto";
extend google.protobuf.FieldOptions { bool csi_secret = 1059; }
message Inner {
  string visible = 1;
  string password = 2 [(csi_secret) = true];
  oneof kind {
    string token = 3 [(csi_secret) = true];
    string plain = 4;
  }
}
message Outer {
  string name = 1;
  int64 pin = 2 [(csi_secret) = true];
  repeated Inner list = 3;
  map<int64, Inner> by_id = 4;
  Inner single = 5;
  map<string, string> creds = 6 [(csi_secret) = true];
  repeated Inner hidden_list = 7 [(csi_secret) = true];
}
"#;

fn nested_pool() -> DescriptorPool {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("nested.proto"), NESTED_PROTO).unwrap();
    let mut compiler = protox::Compiler::new([dir.path()]).unwrap();
    compiler.open_file("nested.proto").unwrap();
    // The compiler's own pool keeps extension options; a prost_types round trip would not.
    compiler.descriptor_pool()
}

#[test]
fn secrets_are_stripped_at_any_depth() {
    let pool = nested_pool();
    let inner_desc = pool.get_message_by_name("csi.v1.Inner").unwrap();
    let outer_desc = pool.get_message_by_name("csi.v1.Outer").unwrap();
    let inner = |visible: &str, token: Option<&str>| {
        let mut m = DynamicMessage::new(inner_desc.clone());
        m.set_field_by_name("visible", Value::String(visible.into()));
        m.set_field_by_name("password", Value::String("pw-leak".into()));
        match token {
            Some(t) => m.set_field_by_name("token", Value::String(t.into())),
            None => m.set_field_by_name("plain", Value::String(String::new())),
        }
        Value::Message(m)
    };
    let mut outer = DynamicMessage::new(outer_desc);
    outer.set_field_by_name("name", Value::String("n".into()));
    outer.set_field_by_name("pin", Value::I64(1234));
    outer.set_field_by_name(
        "list",
        Value::List(vec![inner("a", Some("tok-leak")), inner("b", None)]),
    );
    outer.set_field_by_name(
        "by_id",
        Value::Map(HashMap::from([
            (MapKey::I64(10), inner("c", None)),
            (MapKey::I64(2), inner("d", None)),
        ])),
    );
    outer.set_field_by_name("single", inner("e", Some("tok-leak")));
    outer.set_field_by_name(
        "creds",
        Value::Map(HashMap::from([(
            MapKey::String("u".into()),
            Value::String("creds-leak".into()),
        )])),
    );
    outer.set_field_by_name("hidden_list", Value::List(vec![inner("list-leak", None)]));

    let out = sanitize_dynamic(&outer);
    let s = STRIPPED;
    let want = format!(
        concat!(
            r#"{{"by_id":{{"10":{{"password":"{s}","plain":"","visible":"c"}},"#,
            r#""2":{{"password":"{s}","plain":"","visible":"d"}}}},"creds":"{s}","hidden_list":"{s}","#,
            r#""list":[{{"password":"{s}","token":"{s}","visible":"a"}},"#,
            r#"{{"password":"{s}","plain":"","visible":"b"}}],"name":"n","pin":"{s}","#,
            r#""single":{{"password":"{s}","token":"{s}","visible":"e"}}}}"#
        ),
        s = s
    );
    assert_eq!(out, want);
    assert!(!out.contains("leak") && !out.contains("1234"));
}

/// Without the secret option in the pool no field can be judged: nothing is shown.
#[test]
fn a_pool_without_the_secret_option_prints_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let proto = "syntax = \"proto3\";\npackage csi.v1;\nmessage Bare { map<string, string> secrets = 1; }\n";
    std::fs::write(dir.path().join("bare.proto"), proto).unwrap();
    let mut compiler = protox::Compiler::new([dir.path()]).unwrap();
    compiler.open_file("bare.proto").unwrap();
    let pool = compiler.descriptor_pool();
    let mut msg = DynamicMessage::new(pool.get_message_by_name("csi.v1.Bare").unwrap());
    msg.set_field_by_name(
        "secrets",
        Value::Map(HashMap::from([(
            MapKey::String("k".into()),
            Value::String("creds-leak".into()),
        )])),
    );
    let out = sanitize_dynamic(&msg);
    assert_eq!(
        out,
        "<<csi.v1.Bare: no csi.v1.csi_secret option to find its secrets by>>"
    );
}

#[test]
fn unknown_fields_are_never_shown() {
    let mut bytes = v1::CreateVolumeRequest {
        name: "pvc".into(),
        ..Default::default()
    }
    .encode_to_vec();
    // Field 99, length-delimited: what a newer spec's secret might look like on the wire.
    bytes.extend_from_slice(&[0x9a, 0x06, 7]);
    bytes.extend_from_slice(b"hunter2");
    let out = sanitize_encoded("csi.v1.CreateVolumeRequest", &bytes);
    assert_eq!(out, r#"{"name":"pvc"}"#);
}

#[test]
fn bad_input_is_reported_without_panicking() {
    assert!(sanitize_encoded("csi.v1.NoSuchMessage", &[]).starts_with("<<csi.v1.NoSuchMessage"));
    assert!(sanitize_encoded("csi.v1.CreateVolumeRequest", &[0xff, 0xff]).starts_with("<<decode"));
}

#[test]
fn random_bytes_never_panic() {
    let pool = pool();
    // A fixed xorshift sequence keeps the test deterministic without a dependency.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for desc in pool.all_messages() {
        for _ in 0..300 {
            let len = (next() % 48) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let out = sanitize_encoded(desc.full_name(), &bytes);
            let framed = (out.starts_with('{') && out.ends_with('}'))
                || (out.starts_with("<<") && out.ends_with(">>"));
            assert!(framed, "{}: {out}", desc.full_name());
        }
    }
}
