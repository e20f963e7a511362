//! klog's text format:
//! `I1122 02:07:00.123456   12345 file.rs:123] "message" key="value" count=3`.

use std::fmt::{self, Write as _};
use std::time::SystemTime;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use crate::clock::civil_utc;
use crate::fields::{Fields, Value, go_json_float};
use crate::quote::go_quote;

/// Formats events as klog text lines.
#[derive(Debug, Clone, Copy)]
pub struct TextFormat {
    pub(crate) clock: fn() -> SystemTime,
    pub(crate) pid: u32,
}

/// Formats span fields as klog key/value pairs (` key="value"`), so that fields of the enclosing
/// spans appear on each line like values attached with klog's `WithValues`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TextFields;

/// The header up to and including `] `. Severity is `I`, `W` or `E`; the PID is right-aligned
/// in seven columns, as klog does.
pub fn header(out: &mut String, severity: char, now: SystemTime, pid: u32, file: &str, line: u32) {
    let t = civil_utc(now);
    let _ = write!(
        out,
        "{severity}{:02}{:02} {:02}:{:02}:{:02}.{:06} {:>7} {}:{line}] ",
        t.month,
        t.day,
        t.hour,
        t.minute,
        t.second,
        t.micros,
        pid % 10_000_000,
        basename(file),
    );
}

/// The severity letter klog uses for a tracing level.
pub fn severity(level: &Level) -> char {
    match *level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    }
}

fn basename(file: &str) -> &str {
    file.rsplit(['/', '\\']).next().unwrap_or(file)
}

/// Appends ` key=value` in klog's notation.
pub fn push_kv(out: &mut String, key: &str, value: &Value) {
    out.push(' ');
    out.push_str(key);
    match value {
        Value::Str(s) => push_string_value(out, s),
        Value::I64(n) => {
            let _ = write!(out, "={n}");
        }
        Value::U64(n) => {
            let _ = write!(out, "={n}");
        }
        Value::I128(n) => {
            let _ = write!(out, "={n}");
        }
        Value::U128(n) => {
            let _ = write!(out, "={n}");
        }
        Value::F64(f) => {
            out.push('=');
            out.push_str(&go_json_float(*f));
        }
        Value::Bool(b) => {
            let _ = write!(out, "={b}");
        }
    }
}

/// A single-line string is quoted; a multi-line one is written as klog's block:
/// `key=<` then each line indented by a tab, then ` >` on its own line.
fn push_string_value(out: &mut String, s: &str) {
    if !s.contains('\n') {
        out.push('=');
        out.push_str(&go_quote(s));
        return;
    }
    out.push_str("=<\n");
    let mut rest = s;
    while let Some(i) = rest.find('\n') {
        out.push('\t');
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
    }
    if rest.is_empty() {
        out.push_str(" >");
    } else {
        out.push('\t');
        out.push_str(rest);
        out.push_str("\n >");
    }
}

/// Renders a whole line (with the trailing newline) from already collected parts.
pub fn render_line(
    level: &Level,
    now: SystemTime,
    pid: u32,
    location: (&str, u32),
    mut fields: Fields,
    span_fields: &str,
) -> String {
    let mut out = String::with_capacity(128);
    header(&mut out, severity(level), now, pid, location.0, location.1);
    out.push_str(&go_quote(fields.message.as_deref().unwrap_or("")));
    out.push_str(span_fields);
    // klog's ErrorS writes err= before the other key/value pairs.
    if *level == Level::ERROR
        && let Some(err) = fields.take_err()
    {
        push_kv(&mut out, "err", &err);
    }
    for (k, v) in &fields.kvs {
        push_kv(&mut out, k, v);
    }
    out.push('\n');
    out
}

/// The file and line to print: the `log` bridge's fields win over the callsite.
pub(crate) fn location<'a>(fields: &'a Fields, event: &'a Event<'_>) -> Option<(&'a str, u32)> {
    let meta = event.metadata();
    match (&fields.log_file, fields.log_line) {
        (Some(f), Some(l)) => Some((f.as_str(), l as u32)),
        _ => meta.file().map(|f| (f, meta.line().unwrap_or(0))),
    }
}

impl<S, N> FormatEvent<S, N> for TextFormat
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
        let (file, line) = location(&fields, event).unwrap_or(("???", 1));
        let (file, line) = (file.to_string(), line);
        let line_text = render_line(
            event.metadata().level(),
            (self.clock)(),
            self.pid,
            (&file, line),
            fields,
            &spans,
        );
        writer.write_str(&line_text)
    }
}

impl<'w> FormatFields<'w> for TextFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut collected = Fields::default();
        fields.record(&mut collected);
        let mut out = String::new();
        if let Some(m) = collected.message {
            push_kv(&mut out, "message", &Value::Str(m));
        }
        for (k, v) in &collected.kvs {
            push_kv(&mut out, k, v);
        }
        writer.write_str(&out)
    }

    fn add_fields(
        &self,
        current: &'w mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        // Every pair carries its own leading space, so no separator is needed.
        self.format_fields(current.as_writer(), fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use std::time::{Duration, UNIX_EPOCH};

    fn t() -> SystemTime {
        // 2023-11-22 02:07:00.123456 UTC
        UNIX_EPOCH + Duration::from_micros(1_700_618_820_123_456)
    }

    #[rstest]
    #[case(
        'I',
        12345,
        "src/main.rs",
        123,
        "I1122 02:07:00.123456   12345 main.rs:123] "
    )]
    #[case('W', 1, "/abs/path/x.rs", 7, "W1122 02:07:00.123456       1 x.rs:7] ")]
    #[case(
        'E',
        4_194_304,
        "lib.rs",
        0,
        "E1122 02:07:00.123456 4194304 lib.rs:0] "
    )]
    #[case('I', 123_456_789, "a.rs", 1, "I1122 02:07:00.123456 3456789 a.rs:1] ")]
    fn header_matches_klog(
        #[case] sev: char,
        #[case] pid: u32,
        #[case] file: &str,
        #[case] line: u32,
        #[case] want: &str,
    ) {
        let mut out = String::new();
        header(&mut out, sev, t(), pid, file, line);
        assert_eq!(out, want);
    }

    #[rstest]
    #[case(Value::Str("pvc-1".into()), r#" k="pvc-1""#)]
    #[case(Value::Str("".into()), r#" k="""#)]
    #[case(Value::I64(-3), " k=-3")]
    #[case(Value::U64(3), " k=3")]
    #[case(Value::F64(2.5), " k=2.5")]
    #[case(Value::Bool(true), " k=true")]
    #[case(Value::Str("a\nb".into()), " k=<\n\ta\n\tb\n >")]
    #[case(Value::Str("a\nb\n".into()), " k=<\n\ta\n\tb\n >")]
    fn key_values(#[case] value: Value, #[case] want: &str) {
        let mut out = String::new();
        push_kv(&mut out, "k", &value);
        assert_eq!(out, want);
    }

    #[test]
    fn error_lines_put_err_first() {
        let fields = Fields {
            message: Some("Failed to provision volume".into()),
            kvs: vec![
                ("claim", Value::Str("default/pvc-1".into())),
                ("err", Value::Str("rpc error: code = Internal".into())),
            ],
            ..Fields::default()
        };
        let line = render_line(&Level::ERROR, t(), 42, ("controller.rs", 88), fields, "");
        assert_eq!(
            line,
            "E1122 02:07:00.123456      42 controller.rs:88] \"Failed to provision volume\" \
             err=\"rpc error: code = Internal\" claim=\"default/pvc-1\"\n"
        );
    }

    #[test]
    fn message_is_always_quoted_even_with_newlines() {
        let fields = Fields {
            message: Some("two\nlines".into()),
            ..Fields::default()
        };
        let line = render_line(&Level::INFO, t(), 1, ("a.rs", 1), fields, " ctx=\"x\"");
        assert_eq!(
            line,
            "I1122 02:07:00.123456       1 a.rs:1] \"two\\nlines\" ctx=\"x\"\n"
        );
    }
}
