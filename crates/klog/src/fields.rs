//! Collects a tracing event's fields into plain values both formats can render.

use std::fmt;

use tracing::field::{Field, Visit};

/// One field value, keeping the distinction Go's loggers make between strings (quoted) and
/// numbers or booleans (bare).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    I64(i64),
    U64(u64),
    I128(i128),
    U128(u128),
    F64(f64),
    Bool(bool),
}

/// The fields of one event (or span), split into the parts klog treats specially.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Fields {
    /// The `message` field; klog prints `""` when there is none.
    pub message: Option<String>,
    /// The klog verbosity from the `v` field.
    pub v: Option<u64>,
    /// Source location of events bridged from the `log` crate (`log.file`, `log.line`).
    pub log_file: Option<String>,
    pub log_line: Option<u64>,
    /// Every other field, in the order it was recorded.
    pub kvs: Vec<(&'static str, Value)>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        match (field.name(), value) {
            ("message", Value::Str(s)) => self.message = Some(s),
            ("v", Value::U64(v)) => self.v = Some(v),
            ("v", Value::I64(v)) => self.v = Some(v.max(0) as u64),
            ("log.file", Value::Str(s)) => self.log_file = Some(s),
            ("log.line", Value::U64(l)) => self.log_line = Some(l),
            ("log.line", Value::I64(l)) => self.log_line = Some(l.max(0) as u64),
            // Bookkeeping fields of the log bridge; klog has no equivalent.
            ("log.target" | "log.module_path", _) => {}
            (name, value) => self.kvs.push((name, value)),
        }
    }

    /// Removes and returns the `err` field, which both Go formats place specially.
    pub fn take_err(&mut self) -> Option<Value> {
        let i = self.kvs.iter().position(|(k, _)| *k == "err")?;
        Some(self.kvs.remove(i).1)
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::Str(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::Str(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::I64(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::U64(value));
    }
    fn record_i128(&mut self, field: &Field, value: i128) {
        self.put(field, Value::I128(value));
    }
    fn record_u128(&mut self, field: &Field, value: u128) {
        self.put(field, Value::U128(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::F64(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::Str(value.to_string()));
    }
}

/// Formats a float the way Go's encoding/json does (klog's text format uses it for
/// non-string values): plain decimal in [1e-6, 1e21), exponent form with a sign otherwise.
pub fn go_json_float(f: f64) -> String {
    if !f.is_finite() {
        return format!(
            "\"<internal error: json: unsupported value: {}>\"",
            go_float_name(f)
        );
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{f:e}");
        // Rust prints 1e21 / 1e-7; Go prints 1e+21 / 1e-07 and then trims to 1e-7.
        return match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        };
    }
    format!("{f}")
}

/// Formats a float the way zap's JSON encoder does (`strconv.FormatFloat(f, 'f', -1, 64)`,
/// with NaN and infinities as strings).
pub fn zap_float(f: f64) -> String {
    if f.is_finite() {
        format!("{f}")
    } else {
        format!("\"{}\"", go_float_name(f))
    }
}

fn go_float_name(f: f64) -> &'static str {
    if f.is_nan() {
        "NaN"
    } else if f > 0.0 {
        "+Inf"
    } else {
        "-Inf"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(0.0, "0")]
    #[case(1.5, "1.5")]
    #[case(-2.25, "-2.25")]
    #[case(1e20, "100000000000000000000")]
    #[case(1e21, "1e+21")]
    #[case(1e-7, "1e-7")]
    #[case(0.000001, "0.000001")]
    #[case(f64::NAN, r#""<internal error: json: unsupported value: NaN>""#)]
    fn floats_like_encoding_json(#[case] f: f64, #[case] want: &str) {
        assert_eq!(go_json_float(f), want);
    }

    #[rstest]
    #[case(1700000000000.123, "1700000000000.123")]
    #[case(1e21, "1000000000000000000000")]
    #[case(f64::INFINITY, r#""+Inf""#)]
    #[case(f64::NEG_INFINITY, r#""-Inf""#)]
    #[case(f64::NAN, r#""NaN""#)]
    fn floats_like_zap(#[case] f: f64, #[case] want: &str) {
        assert_eq!(zap_float(f), want);
    }
}
