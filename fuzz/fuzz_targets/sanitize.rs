//! The secret-stripping log formatter of CSI messages.
//!
//! Properties: whatever else a message of any csi.proto type holds (arbitrary bytes merged with
//! it), a value in a field marked `csi_secret` never appears in its log form; arbitrary bytes
//! under any message name never panic.
#![no_main]

use arbitrary::Arbitrary;
use csi::sanitize::{SECRET_EXTENSION, descriptor_pool, is_secret, sanitize_encoded};
use libfuzzer_sys::fuzz_target;
use prost_reflect::{DynamicMessage, Kind, MapKey, Value};

const MARKER: &str = "Zq9FuzzSecretMarker";

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    message: u8,
    bytes: &'a [u8],
}

fuzz_target!(|input: Input<'_>| {
    let pool = descriptor_pool().expect("the descriptor set decodes");
    let messages: Vec<_> = pool.all_messages().collect();
    let desc = &messages[usize::from(input.message) % messages.len()];
    // Arbitrary bytes alone: no panic, whatever the result.
    let _ = sanitize_encoded(desc.full_name(), input.bytes);
    let _ = sanitize_encoded("csi.v1.NoSuchMessage", input.bytes);

    // The same bytes followed by the marker in every secret field: protobuf merges the two, so
    // the message holds whatever the bytes say plus our secrets.
    // The bytes must be a whole message of their own: otherwise an unfinished field at their
    // end would swallow our fields and the marker would not be in a secret field at all.
    if input
        .bytes
        .windows(MARKER.len())
        .any(|w| w == MARKER.as_bytes())
        || DynamicMessage::decode(desc.clone(), input.bytes).is_err()
    {
        return;
    }
    let secret = pool.get_extension_by_name(SECRET_EXTENSION);
    let mut with_secrets = DynamicMessage::new(desc.clone());
    let mut any = false;
    for field in desc.fields().filter(|f| is_secret(f, secret.as_ref())) {
        let value = match field.kind() {
            Kind::Message(_) if field.is_map() => {
                let entry = (
                    MapKey::String(format!("{MARKER}-key")),
                    Value::String(MARKER.into()),
                );
                Value::Map([entry].into_iter().collect())
            }
            Kind::String if field.is_list() => Value::List(vec![Value::String(MARKER.into())]),
            Kind::String => Value::String(MARKER.into()),
            Kind::Bytes => Value::Bytes(MARKER.as_bytes().to_vec().into()),
            _ => continue,
        };
        with_secrets.set_field(&field, value);
        any = true;
    }
    if !any {
        return;
    }
    let mut merged = input.bytes.to_vec();
    merged.extend(prost::Message::encode_to_vec(&with_secrets));
    let logged = sanitize_encoded(desc.full_name(), &merged);
    assert!(
        !logged.contains(MARKER),
        "{} leaks a secret: {logged}",
        desc.full_name()
    );
});
