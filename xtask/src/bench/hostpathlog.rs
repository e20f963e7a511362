//! csi-driver-host-path's gRPC call log: each call is one klog line ending in
//! `gRPCCall: {"Method":...}`, logged as the call returns. Only the klog header says when, and
//! it has no year and no zone (`I1126 00:43:17.805240 ...`, the plugin's local time).

use std::path::Path;

use jiff::Timestamp;
use jiff::civil::{Date, Time};
use jiff::tz::TimeZone;
use serde_json::Value;

/// The parts of one logged call the benchmarks use.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The method's last path element (`CreateVolume`).
    pub method: String,
    /// `Request.name` (the volume name of CreateVolume), if any.
    pub name: Option<String>,
    pub ok: bool,
    /// When the call returned (the line's klog time).
    pub at: Timestamp,
}

/// The time of a klog header in `tz`, in the year that puts it closest to `near` (the log
/// has none; a run that spans New Year still reads right).
pub fn header_time(line: &str, near: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
    let mut parts = line.split_whitespace();
    let head = parts.next()?;
    let (severity, mmdd) = head.split_at_checked(1)?;
    if !"IWEF".contains(severity) || mmdd.len() != 4 || !mmdd.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let month: i8 = mmdd[..2].parse().ok()?;
    let day: i8 = mmdd[2..].parse().ok()?;
    let time: Time = parts.next()?.parse().ok()?;
    let year = near.to_zoned(tz.clone()).year();
    (year - 1..=year + 1)
        .filter_map(|y| {
            let dt = Date::new(y, month, day).ok()?.to_datetime(time);
            dt.to_zoned(tz.clone()).ok().map(|z| z.timestamp())
        })
        .min_by_key(|t| t.duration_since(near).abs())
}

/// Every call in the log text whose line parses; `near` and `tz` as in [`header_time`].
pub fn parse(log: &str, near: Timestamp, tz: &TimeZone) -> Vec<Call> {
    log.lines()
        .filter_map(|line| {
            let json = &line[line.find("gRPCCall: {")? + "gRPCCall: ".len()..];
            let v: Value = serde_json::from_str(json).ok()?;
            let method = v.get("Method")?.as_str()?;
            Some(Call {
                method: method.rsplit('/').next().unwrap_or(method).to_string(),
                name: v["Request"]["name"].as_str().map(str::to_string),
                ok: v.get("Error").and_then(Value::as_str) == Some(""),
                at: header_time(line, near, tz)?,
            })
        })
        .collect()
}

/// Reads the plugin's log (a missing file is an empty log) in the machine's time zone, which
/// the plugin, started from here, shares.
pub fn read(path: &Path, near: Timestamp) -> Vec<Call> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    parse(&text, near, &TimeZone::system())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn header_times() {
        let utc = TimeZone::UTC;
        let near = ts("2026-11-26T01:00:00Z");
        let cases = [
            (
                "I1126 00:43:17.805240   12345 server.go:152] x",
                Some("2026-11-26T00:43:17.80524Z"),
            ),
            (
                "E0101 00:00:01.000000 1 x.go:1] y",
                Some("2027-01-01T00:00:01Z"),
            ),
            (
                "I1126 00:43:17 1 x.go:1] no fraction",
                Some("2026-11-26T00:43:17Z"),
            ),
            ("X1126 00:43:17.805240 1 x.go:1] z", None),
            ("I11 00:43:17.805240", None),
            ("I1126", None),
            ("I1126 25:00:00.000000 1 x.go:1] bad", None),
            ("", None),
        ];
        for (line, want) in cases {
            assert_eq!(header_time(line, near, &utc), want.map(ts), "{line:?}");
        }
        // Near New Year the other way: December belongs to the year before.
        let jan = ts("2027-01-01T00:10:00Z");
        assert_eq!(
            header_time("I1231 23:59:59.500000 1 x.go:1] z", jan, &utc),
            Some(ts("2026-12-31T23:59:59.5Z"))
        );
        // The header is local time.
        let cet = TimeZone::fixed(jiff::tz::offset(1));
        assert_eq!(
            header_time("I1126 01:43:17.000000 1 x.go:1] z", near, &cet),
            Some(ts("2026-11-26T00:43:17Z"))
        );
    }

    #[test]
    fn calls_are_parsed_from_their_lines() {
        let log = concat!(
            "I1126 00:43:17.000001 7 server.go:105] GRPC call: /csi.v1.Controller/CreateVolume\n",
            "I1126 00:43:17.100000 7 server.go:159] gRPCCall: {\"Method\":\"/csi.v1.Controller/CreateVolume\",\"Request\":{\"name\":\"pvc-a\"},\"Response\":{},\"Error\":\"\",\"FullError\":null}\n",
            "I1126 00:43:18.250000 7 server.go:159] gRPCCall: {\"Method\":\"/csi.v1.Controller/CreateVolume\",\"Request\":{\"name\":\"pvc-b\"},\"Response\":null,\"Error\":\"rpc error: code = NotFound\",\"FullError\":{}}\n",
            "I1126 00:43:19.000000 7 server.go:159] gRPCCall: {\"Method\":\"/csi.v1.Identity/Probe\",\"Request\":{},\"Response\":{},\"Error\":\"\"}\n",
            "I1126 00:43:19.500000 7 server.go:159] gRPCCall: {\"Method\":\"/csi.v1.Controller/Crea\n",
        );
        let calls = parse(log, ts("2026-11-26T00:00:00Z"), &TimeZone::UTC);
        assert_eq!(calls.len(), 3, "{calls:?}");
        assert_eq!(
            calls[0],
            Call {
                method: "CreateVolume".into(),
                name: Some("pvc-a".into()),
                ok: true,
                at: ts("2026-11-26T00:43:17.1Z"),
            }
        );
        assert!(!calls[1].ok);
        assert_eq!(calls[2].method, "Probe");
        assert_eq!(calls[2].name, None);
        assert!(
            read(
                Path::new("/nonexistent/hostpathplugin.log"),
                Timestamp::now()
            )
            .is_empty()
        );
    }
}
