//! component-base's JSON format (`--logging-format=json`, zap through zapr):
//! `{"ts":1700000000000.123,"caller":"src/main.rs:12","msg":"...","v":5,"key":"value"}`.
//!
//! Info and warning lines carry `"v"` (warnings are `klog.Warning`, which becomes an info entry
//! at level 0 there); error lines carry no `"v"` and put `"err"` last. There is no level key.

use std::fmt::{self, Write as _};
use std::time::SystemTime;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use crate::clock::epoch_millis;
use crate::fields::{Fields, Value, zap_float};
use crate::filter::implied_v;
use crate::quote::push_json_string;
use crate::text::location;

/// Formats events as component-base JSON lines.
#[derive(Debug, Clone, Copy)]
pub struct JsonFormat {
    pub(crate) clock: fn() -> SystemTime,
}

/// Formats span fields as `,"key":value` fragments for [`JsonFormat`].
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonFields;

/// zap's short caller: the last directory and the file name, `dir/file.rs:line`.
pub fn short_caller(file: &str, line: u32) -> String {
    let file = file.replace('\\', "/");
    let trimmed = match file.rfind('/') {
        Some(last) => match file[..last].rfind('/') {
            Some(prev) => &file[prev + 1..],
            None => &file[..],
        },
        None => &file[..],
    };
    format!("{trimmed}:{line}")
}

/// Appends `,"key":value`.
pub fn push_member(out: &mut String, key: &str, value: &Value) {
    out.push(',');
    push_json_string(out, key);
    out.push(':');
    match value {
        Value::Str(s) => push_json_string(out, s),
        Value::I64(n) => {
            let _ = write!(out, "{n}");
        }
        Value::U64(n) => {
            let _ = write!(out, "{n}");
        }
        Value::I128(n) => {
            let _ = write!(out, "{n}");
        }
        Value::U128(n) => {
            let _ = write!(out, "{n}");
        }
        Value::F64(f) => out.push_str(&zap_float(*f)),
        Value::Bool(b) => {
            let _ = write!(out, "{b}");
        }
    }
}

/// Renders a whole JSON line (with the trailing newline) from already collected parts.
pub fn render_line(
    level: &Level,
    now: SystemTime,
    caller: Option<(&str, u32)>,
    mut fields: Fields,
    span_fields: &str,
) -> String {
    let mut out = String::with_capacity(160);
    out.push_str("{\"ts\":");
    out.push_str(&zap_float(epoch_millis(now)));
    out.push_str(",\"caller\":");
    let caller = caller.map_or_else(|| "undefined".to_string(), |(f, l)| short_caller(f, l));
    push_json_string(&mut out, &caller);
    out.push_str(",\"msg\":");
    push_json_string(&mut out, fields.message.as_deref().unwrap_or(""));
    let is_error = *level == Level::ERROR;
    if !is_error {
        let v = fields.v.unwrap_or_else(|| u64::from(implied_v(level)));
        let _ = write!(out, ",\"v\":{v}");
    }
    out.push_str(span_fields);
    let err = if is_error { fields.take_err() } else { None };
    for (k, v) in &fields.kvs {
        push_member(&mut out, k, v);
    }
    if let Some(err) = err {
        push_member(&mut out, "err", &err);
    }
    out.push_str("}\n");
    out
}

impl<S, N> FormatEvent<S, N> for JsonFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut spans = String::new();
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                if let Some(f) = span.extensions().get::<FormattedFields<N>>() {
                    spans.push_str(&f.fields);
                }
            }
        }
        let caller = location(&fields, event).map(|(f, l)| (f.to_string(), l));
        let line = render_line(
            event.metadata().level(),
            (self.clock)(),
            caller.as_ref().map(|(f, l)| (f.as_str(), *l)),
            fields,
            &spans,
        );
        writer.write_str(&line)
    }
}

impl<'w> FormatFields<'w> for JsonFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut collected = Fields::default();
        fields.record(&mut collected);
        let mut out = String::new();
        if let Some(m) = collected.message {
            push_member(&mut out, "message", &Value::Str(m));
        }
        for (k, v) in &collected.kvs {
            push_member(&mut out, k, v);
        }
        writer.write_str(&out)
    }

    fn add_fields(
        &self,
        current: &'w mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        // Every member carries its own leading comma.
        self.format_fields(current.as_writer(), fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use std::time::{Duration, UNIX_EPOCH};

    fn t() -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456)
    }

    #[rstest]
    #[case("crates/provisioner/src/main.rs", 12, "src/main.rs:12")]
    #[case(
        "/root/.cargo/registry/src/x/kube-runtime-5.0.0/src/watcher.rs",
        3,
        "src/watcher.rs:3"
    )]
    #[case("src/lib.rs", 1, "src/lib.rs:1")]
    #[case("lib.rs", 1, "lib.rs:1")]
    fn caller_keeps_the_last_directory(#[case] file: &str, #[case] line: u32, #[case] want: &str) {
        assert_eq!(short_caller(file, line), want);
    }

    #[test]
    fn info_line_shape() {
        let fields = Fields {
            message: Some("GRPC call".into()),
            v: Some(5),
            kvs: vec![
                ("method", Value::Str("/csi.v1.Identity/Probe".into())),
                ("attempt", Value::U64(2)),
                ("ok", Value::Bool(true)),
            ],
            ..Fields::default()
        };
        let line = render_line(
            &Level::INFO,
            t(),
            Some(("crates/csi/src/client.rs", 40)),
            fields,
            "",
        );
        assert_eq!(
            line,
            "{\"ts\":1700000000123.456,\"caller\":\"src/client.rs:40\",\"msg\":\"GRPC call\",\
             \"v\":5,\"method\":\"/csi.v1.Identity/Probe\",\"attempt\":2,\"ok\":true}\n"
        );
    }

    #[test]
    fn error_line_has_no_v_and_err_last() {
        let fields = Fields {
            message: Some("Failed".into()),
            kvs: vec![
                ("err", Value::Str("boom \"x\"".into())),
                ("pvc", Value::Str("a/b".into())),
            ],
            ..Fields::default()
        };
        let line = render_line(
            &Level::ERROR,
            t(),
            Some(("src/a.rs", 9)),
            fields,
            ",\"ctx\":1",
        );
        assert_eq!(
            line,
            "{\"ts\":1700000000123.456,\"caller\":\"src/a.rs:9\",\"msg\":\"Failed\",\"ctx\":1,\
             \"pvc\":\"a/b\",\"err\":\"boom \\\"x\\\"\"}\n"
        );
    }

    #[test]
    fn warnings_are_level_zero_info_entries() {
        let fields = Fields {
            message: Some("careful".into()),
            ..Fields::default()
        };
        let line = render_line(&Level::WARN, t(), None, fields, "");
        assert_eq!(
            line,
            "{\"ts\":1700000000123.456,\"caller\":\"undefined\",\"msg\":\"careful\",\"v\":0}\n"
        );
    }
}
