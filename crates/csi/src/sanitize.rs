//! Secret-free rendering of CSI messages for logs, equivalent to csi-lib-utils' `protosanitizer`.
//!
//! A message renders as one line of JSON the way the Go sidecars print it: only populated fields,
//! keyed by their `.proto` names, object keys sorted, enums by value name (the number if unknown),
//! a set oneof member under its own field name, and every field marked `(csi.v1.csi_secret) = true`
//! replaced by `"***stripped***"` at any depth. Secret fields are found from the descriptor at run
//! time, never from a list kept by hand. Unknown fields (for example from a newer CSI spec) are
//! never shown, because they might be secrets we cannot recognise.
//!
//! Rendering is lazy: [`sanitize`] returns a cheap wrapper that does the work only when it is
//! formatted, so it can be passed to a log macro whose level is off.

mod json;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::LazyLock;

use prost_reflect::{
    DescriptorPool, DynamicMessage, ExtensionDescriptor, FieldDescriptor, Kind, MapKey,
    ReflectMessage as _, Value,
};

use self::json::Json;

/// What a secret field's value is replaced with, as in Go.
pub const STRIPPED: &str = "***stripped***";

/// Full name of the field option that marks a secret.
pub const SECRET_EXTENSION: &str = "csi.v1.csi_secret";

static POOL: LazyLock<Option<DescriptorPool>> =
    LazyLock::new(|| DescriptorPool::decode(crate::FILE_DESCRIPTOR_SET).ok());

/// The descriptor pool of this crate's `csi.proto`, or `None` if the checked-in descriptor could
/// not be decoded (a build defect that the crate's tests catch).
pub fn descriptor_pool() -> Option<&'static DescriptorPool> {
    POOL.as_ref()
}

/// Wraps a CSI message so that formatting it (with `{}` or `{:?}`) prints the sanitised JSON.
pub fn sanitize<M: prost::Message + prost::Name>(msg: &M) -> Sanitized<'_, M> {
    Sanitized(msg)
}

/// A CSI message that formats as sanitised JSON. See [`sanitize`].
pub struct Sanitized<'a, M>(&'a M);

impl<M: prost::Message + prost::Name> fmt::Display for Sanitized<'_, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&sanitize_encoded(&M::full_name(), &self.0.encode_to_vec()))
    }
}

// Debug prints the same as Display so that `?msg` in a log macro cannot leak a secret either.
impl<M: prost::Message + prost::Name> fmt::Debug for Sanitized<'_, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Sanitises the protobuf encoding of the message named `full_name` (e.g.
/// `csi.v1.CreateVolumeRequest`). Problems are reported inside the returned text, Go style
/// (`<<...>>`), and never include field values.
pub fn sanitize_encoded(full_name: &str, encoded: &[u8]) -> String {
    let Some(pool) = descriptor_pool() else {
        return "<<csi descriptor set cannot be decoded>>".to_string();
    };
    let Some(desc) = pool.get_message_by_name(full_name) else {
        return format!("<<{full_name} is not a csi.proto message>>");
    };
    match DynamicMessage::decode(desc, encoded) {
        Ok(msg) => sanitize_dynamic(&msg),
        Err(e) => format!("<<decode {full_name}: {e}>>"),
    }
}

/// Sanitises a dynamic message. Secret fields are those carrying the option
/// [`SECRET_EXTENSION`] in the message's own descriptor pool, so this also works for
/// descriptors other than this crate's.
///
/// A pool without that option cannot say which fields are secret: nothing is printed then.
pub fn sanitize_dynamic(msg: &DynamicMessage) -> String {
    let Some(secret) = msg
        .descriptor()
        .parent_pool()
        .get_extension_by_name(SECRET_EXTENSION)
    else {
        return format!(
            "<<{}: no {SECRET_EXTENSION} option to find its secrets by>>",
            msg.descriptor().full_name()
        );
    };
    match message_json(msg, Some(&secret)).render() {
        Ok(s) => s,
        Err(e) => format!("<<json.Marshal {}: {e}>>", msg.descriptor().full_name()),
    }
}

/// Full names (`package.Message.field`) of every field in this crate's `csi.proto` that is
/// marked as a secret, sorted.
pub fn secret_fields() -> Vec<String> {
    let Some(pool) = descriptor_pool() else {
        return Vec::new();
    };
    let secret = pool.get_extension_by_name(SECRET_EXTENSION);
    let mut names: Vec<String> = pool
        .all_messages()
        .flat_map(|m| m.fields().collect::<Vec<_>>())
        .filter(|f| is_secret(f, secret.as_ref()))
        .map(|f| f.full_name().to_string())
        .collect();
    names.sort();
    names
}

/// Whether the field carries `(csi_secret) = true`. Without the extension nothing is secret.
pub fn is_secret(field: &FieldDescriptor, secret: Option<&ExtensionDescriptor>) -> bool {
    let Some(secret) = secret else {
        return false;
    };
    let options = field.options();
    options.has_extension(secret) && options.get_extension(secret).as_bool() == Some(true)
}

fn message_json(msg: &DynamicMessage, secret: Option<&ExtensionDescriptor>) -> Json {
    let fields = msg
        .fields()
        .map(|(field, value)| {
            let rendered = if is_secret(&field, secret) {
                Json::Str(STRIPPED.to_string())
            } else {
                field_json(&field, value, secret)
            };
            (field.name().to_string(), rendered)
        })
        .collect::<BTreeMap<_, _>>();
    Json::Object(fields)
}

fn field_json(
    field: &FieldDescriptor,
    value: &Value,
    secret: Option<&ExtensionDescriptor>,
) -> Json {
    match value {
        Value::List(items) => Json::Array(
            items
                .iter()
                .map(|v| single_json(&field.kind(), v, secret))
                .collect(),
        ),
        Value::Map(entries) => {
            // The entry's value field tells how to render values (enum names, nested messages).
            let value_kind = match field.kind() {
                Kind::Message(entry) if entry.is_map_entry() => {
                    entry.map_entry_value_field().kind()
                }
                other => other,
            };
            let object = entries
                .iter()
                .map(|(k, v)| (map_key(k), single_json(&value_kind, v, secret)))
                .collect();
            Json::Object(object)
        }
        single => single_json(&field.kind(), single, secret),
    }
}

fn single_json(kind: &Kind, value: &Value, secret: Option<&ExtensionDescriptor>) -> Json {
    match value {
        Value::Bool(b) => Json::Bool(*b),
        Value::I32(i) => Json::Int(i64::from(*i)),
        Value::I64(i) => Json::Int(*i),
        Value::U32(u) => Json::Uint(u64::from(*u)),
        Value::U64(u) => Json::Uint(*u),
        Value::F32(f) => Json::F32(*f),
        Value::F64(f) => Json::F64(*f),
        Value::String(s) => Json::Str(s.clone()),
        Value::Bytes(b) => Json::Bytes(b.to_vec()),
        Value::EnumNumber(n) => match kind {
            Kind::Enum(e) => match e.get_value(*n) {
                Some(v) => Json::Str(v.name().to_string()),
                None => Json::Int(i64::from(*n)),
            },
            _ => Json::Int(i64::from(*n)),
        },
        Value::Message(m) => message_json(m, secret),
        // Lists and maps never nest directly in protobuf; render them anyway rather than fail.
        Value::List(items) => {
            Json::Array(items.iter().map(|v| single_json(kind, v, secret)).collect())
        }
        Value::Map(entries) => Json::Object(
            entries
                .iter()
                .map(|(k, v)| (map_key(k), single_json(kind, v, secret)))
                .collect(),
        ),
    }
}

/// Go prints map keys with `MapKey.String()`: decimal numbers, `true`/`false`, or the string.
fn map_key(key: &MapKey) -> String {
    match key {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(i) => i.to_string(),
        MapKey::I64(i) => i.to_string(),
        MapKey::U32(u) => u.to_string(),
        MapKey::U64(u) => u.to_string(),
        MapKey::String(s) => s.clone(),
    }
}

#[cfg(test)]
mod tests;
