//! klog's two line formats (text and JSON) from arbitrary messages and field values: the
//! values come from claims, classes and the driver's answers, which anyone may shape.
//! Properties: a JSON line is one line of valid JSON whose message and fields read back as
//! given (strings exactly, integers exactly); a text line with no newline in its values is
//! one line; neither format panics.

#![no_main]

use std::time::{Duration, SystemTime};

use arbitrary::Arbitrary;
use klog::tracing::Level;
use klog::{Fields, Value};
use libfuzzer_sys::fuzz_target;

/// Field names as the code records them (static strings); the fuzzer picks among them.
const KEYS: [&str; 6] = ["claim", "volume", "reason", "capacity", "ok", "err"];

#[derive(Debug, Arbitrary)]
enum AnyValue {
    Str(String),
    I64(i64),
    U64(u64),
    Bool(bool),
    F64(f64),
}

#[derive(Debug, Arbitrary)]
struct Input {
    message: Option<String>,
    v: Option<u8>,
    error_level: bool,
    fields: Vec<(u8, AnyValue)>,
    file: String,
    line: u32,
    secs: u32,
}

fn value(v: &AnyValue) -> Value {
    match v {
        AnyValue::Str(s) => Value::Str(s.clone()),
        AnyValue::I64(n) => Value::I64(*n),
        AnyValue::U64(n) => Value::U64(*n),
        AnyValue::Bool(b) => Value::Bool(*b),
        AnyValue::F64(f) => Value::F64(*f),
    }
}

fuzz_target!(|input: Input| {
    let level = if input.error_level {
        Level::ERROR
    } else {
        Level::INFO
    };
    let mut fields = Fields {
        message: input.message.clone(),
        v: input.v.map(u64::from),
        ..Fields::default()
    };
    // One value per key: the read-back check looks fields up by name.
    let mut seen = std::collections::BTreeSet::new();
    for (k, v) in &input.fields {
        let key = KEYS[usize::from(*k) % KEYS.len()];
        if seen.insert(key) {
            fields.kvs.push((key, value(v)));
        }
    }
    // The caller's file is a source path from `file!()`, never input: no line breaks.
    let file = input.file.replace(['\n', '\r'], "");
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(u64::from(input.secs));

    let json = klog::json::render_line(&level, now, Some((&file, input.line)), fields.clone(), "");
    assert!(json.ends_with('\n'), "{json:?}");
    assert_eq!(json.matches('\n').count(), 1, "one JSON line: {json:?}");
    let parsed: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("invalid JSON {json:?}: {e}"));
    assert_eq!(
        parsed["msg"].as_str(),
        Some(input.message.as_deref().unwrap_or("")),
        "{json:?}"
    );
    for (key, v) in &fields.kvs {
        let got = &parsed[*key];
        match v {
            Value::Str(s) => assert_eq!(got.as_str(), Some(s.as_str()), "{key} in {json:?}"),
            Value::I64(n) => assert_eq!(got.as_i64(), Some(*n), "{key} in {json:?}"),
            Value::U64(n) => assert_eq!(got.as_u64(), Some(*n), "{key} in {json:?}"),
            Value::Bool(b) => assert_eq!(got.as_bool(), Some(*b), "{key} in {json:?}"),
            // Go's encoder writes NaN and infinities as strings; finite ones as numbers.
            Value::F64(f) if f.is_finite() => assert!(got.is_number(), "{key} in {json:?}"),
            _ => {}
        }
    }

    let text = klog::text::render_line(&level, now, 1, (&file, input.line), fields, "");
    assert!(text.ends_with('\n'), "{text:?}");
    let multi_line = input
        .fields
        .iter()
        .any(|(_, v)| matches!(v, AnyValue::Str(s) if s.contains('\n')));
    if !multi_line {
        assert_eq!(text.matches('\n').count(), 1, "one text line: {text:?}");
    }
});
