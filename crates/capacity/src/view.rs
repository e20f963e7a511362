//! What the capacity view shows (ours): the `/capacity` page of the HTTP endpoint and the
//! `csi-provisioner capacity` command. One row per (segment, class), rendered as text or as
//! a self-contained HTML page (no external assets: it must work in air-gapped clusters).

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// One (segment, class) as the provisioner sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// StorageClass name.
    pub class: String,
    /// `key=value,...` of the segment.
    pub segment: String,
    /// Published `capacity`, bytes (`None`: nothing published).
    pub capacity: Option<i64>,
    /// Published `maximumVolumeSize`, bytes.
    pub maximum_volume_size: Option<i64>,
    /// The driver's last answer, bytes, before reservations (`None`: never answered, or not
    /// known to whoever built the row).
    pub reading: Option<i64>,
    /// Bytes taken by volumes being created.
    pub reserved: i64,
    /// Claims whose CreateVolume runs there now.
    pub in_flight: usize,
    /// Seconds since GetCapacity last answered (`None`: not known here).
    pub seconds_since_success: Option<f64>,
    /// GetCapacity failures in a row.
    pub consecutive_failures: u32,
    /// Older than `--capacity-stale-after`.
    pub stale: bool,
}

/// Claims of a class waiting for a node, shown under the class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// StorageClass name.
    pub class: String,
    /// Unbound claims of our driver without a selected node.
    pub claims: usize,
}

/// Everything the view shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct View {
    /// CSI driver name.
    pub driver: String,
    /// One per (segment, class), sorted by class then segment.
    pub rows: Vec<Row>,
    /// Per class.
    pub waiting: Vec<Waiting>,
}

/// Bytes for people: whole binary units as Kubernetes writes them (`45Gi`), else one decimal.
pub fn human(bytes: i64) -> String {
    const UNITS: [(&str, i64); 5] = [
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if bytes.abs() >= size {
            return if bytes % size == 0 {
                format!("{}{unit}", bytes / size)
            } else {
                format!("{:.1}{unit}", bytes as f64 / size as f64)
            };
        }
    }
    bytes.to_string()
}

fn opt_bytes(v: Option<i64>) -> String {
    v.map_or_else(|| "-".into(), human)
}

fn age(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |s| format!("{s:.0}s"))
}

/// A table for a terminal.
pub fn text(view: &View) -> String {
    let header = [
        "CLASS",
        "SEGMENT",
        "CAPACITY",
        "MAX VOLUME",
        "DRIVER SAYS",
        "RESERVED",
        "IN FLIGHT",
        "LAST ANSWER",
        "FAILURES",
        "",
    ];
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in &view.rows {
        lines.push(vec![
            r.class.clone(),
            r.segment.clone(),
            opt_bytes(r.capacity),
            opt_bytes(r.maximum_volume_size),
            opt_bytes(r.reading),
            human(r.reserved),
            r.in_flight.to_string(),
            age(r.seconds_since_success),
            r.consecutive_failures.to_string(),
            if r.stale {
                "STALE".into()
            } else {
                String::new()
            },
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for l in &lines {
        let cells: Vec<String> = l
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    for w in view.waiting.iter().filter(|w| w.claims > 0) {
        let _ = writeln!(
            out,
            "{} claim(s) of class {} wait for a node",
            w.claims, w.class
        );
    }
    out
}

/// The `/capacity` page: per class, one bar per segment (published capacity, the part held by
/// volumes being made, stale segments marked), reloading itself every `refresh_seconds`.
pub fn html(view: &View, refresh_seconds: u32) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{refresh_seconds}\">\
         <title>Storage capacity: {driver}</title><style>{STYLE}</style></head><body>\
         <h1>Storage capacity of <code>{driver}</code></h1>\
         <p class=\"legend\"><span class=\"sw pub\"></span>published \
         <span class=\"sw res\"></span>reserved for volumes being created \
         <span class=\"sw stale\"></span>stale (GetCapacity not answering)</p>",
        driver = gofmt::html_escape(&view.driver)
    );
    if view.rows.is_empty() {
        out.push_str("<p id=\"empty\">No CSIStorageCapacity objects are published yet.</p>");
    }
    let mut classes: Vec<&str> = view.rows.iter().map(|r| r.class.as_str()).collect();
    classes.dedup();
    for class in classes {
        let rows: Vec<&Row> = view.rows.iter().filter(|r| r.class == class).collect();
        // Bars share one scale per class: the largest of reading and published value.
        let scale = rows
            .iter()
            .map(|r| r.reading.unwrap_or(0).max(r.capacity.unwrap_or(0)))
            .max()
            .unwrap_or(0)
            .max(1) as f64;
        let _ = write!(
            out,
            "<section class=\"class\" data-class=\"{c}\"><h2>Class <code>{c}</code></h2><table>\
             <tr><th>Segment</th><th></th><th>Capacity</th><th>Max volume</th>\
             <th>Reserved</th><th>Last answer</th></tr>",
            c = gofmt::html_escape(class)
        );
        for r in rows {
            let published = r.capacity.unwrap_or(0).max(0) as f64;
            let pub_pct = 100.0 * published / scale;
            let res_pct = (100.0 * r.reserved.max(0) as f64 / scale).min(100.0 - pub_pct);
            let stale = if r.stale { " stale" } else { "" };
            let _ = write!(
                out,
                "<tr class=\"row{stale}\" data-segment=\"{seg}\"><td class=\"seg\">{seg}</td>\
                 <td class=\"bar\"><div class=\"track\"><div class=\"pub\" style=\"width:{pub_pct:.1}%\"></div>\
                 <div class=\"res\" style=\"width:{res_pct:.1}%\"></div></div></td>\
                 <td class=\"cap\">{cap}</td><td>{max}</td><td>{res} ({n})</td>\
                 <td>{age}{fails}{mark}</td></tr>",
                seg = gofmt::html_escape(&r.segment),
                cap = opt_bytes(r.capacity),
                max = opt_bytes(r.maximum_volume_size),
                res = human(r.reserved),
                n = r.in_flight,
                age = age(r.seconds_since_success),
                fails = if r.consecutive_failures > 0 {
                    format!(", {} failure(s)", r.consecutive_failures)
                } else {
                    String::new()
                },
                mark = if r.stale { " <b>STALE</b>" } else { "" },
            );
        }
        out.push_str("</table>");
        if let Some(w) = view
            .waiting
            .iter()
            .find(|w| w.class == class && w.claims > 0)
        {
            let _ = write!(
                out,
                "<p class=\"waiting\">{} claim(s) wait for a node</p>",
                w.claims
            );
        }
        out.push_str("</section>");
    }
    out.push_str("</body></html>\n");
    out
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;width:100%}td,th{padding:4px 8px;text-align:left;\
border-bottom:1px solid #ddd}td.bar{width:40%}.track{display:flex;height:14px;\
background:#eee;border-radius:3px;overflow:hidden}.pub{background:#2e7d32}\
.res{background:#f9a825}tr.stale .pub{background:#c62828}tr.stale td.seg{color:#c62828}\
.sw{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}\
.sw.pub{background:#2e7d32}.sw.res{background:#f9a825}.sw.stale{background:#c62828}\
.waiting{color:#555}";

#[cfg(test)]
mod tests {
    use super::*;

    const GI: i64 = 1 << 30;

    fn row(segment: &str, capacity: i64, reserved: i64, stale: bool) -> Row {
        Row {
            class: "fast".into(),
            segment: segment.into(),
            capacity: Some(capacity),
            maximum_volume_size: None,
            reading: Some(capacity + reserved),
            reserved,
            in_flight: usize::from(reserved > 0),
            seconds_since_success: Some(3.2),
            consecutive_failures: u32::from(stale),
            stale,
        }
    }

    #[test]
    fn human_bytes() {
        let cases = [
            (0, "0"),
            (512, "512"),
            (1024, "1Ki"),
            (45 * GI, "45Gi"),
            (GI + GI / 2, "1.5Gi"),
            (1 << 40, "1Ti"),
        ];
        for (b, want) in cases {
            assert_eq!(human(b), want);
        }
    }

    #[test]
    fn text_has_a_row_per_key_and_the_waiting_claims() {
        let view = View {
            driver: "d".into(),
            rows: vec![
                row("node=a", 55 * GI, 45 * GI, false),
                row("node=b", 0, 0, true),
            ],
            waiting: vec![Waiting {
                class: "fast".into(),
                claims: 2,
            }],
        };
        let t = text(&view);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("CLASS"), "{t}");
        assert!(
            lines[1].contains("node=a") && lines[1].contains("55Gi") && lines[1].contains("100Gi"),
            "{t}"
        );
        assert!(lines[2].ends_with("STALE"), "{t}");
        assert_eq!(lines[3], "2 claim(s) of class fast wait for a node");
    }

    #[test]
    fn html_is_self_contained_escaped_and_marks_stale_rows() {
        let mut view = View {
            driver: "<d>".into(),
            rows: vec![
                row("node=a", 55 * GI, 45 * GI, false),
                row("node=b", 100 * GI, 0, true),
            ],
            waiting: vec![],
        };
        let h = html(&view, 5);
        assert!(h.contains("content=\"5\""));
        assert!(h.contains("&lt;d&gt;") && !h.contains("<d>"));
        assert!(!h.contains("http://") && !h.contains("https://") && !h.contains("<script"));
        assert!(
            h.contains("<tr class=\"row\" data-segment=\"node=a\">"),
            "{h}"
        );
        assert!(
            h.contains("<tr class=\"row stale\" data-segment=\"node=b\">"),
            "{h}"
        );
        // node=a: 55 of 100 published, 45 reserved.
        assert!(
            h.contains("width:55.0%") && h.contains("width:45.0%"),
            "{h}"
        );
        view.rows.clear();
        assert!(html(&view, 5).contains("id=\"empty\""));
    }
}

/// The view as the API server alone tells it (`csi-provisioner capacity` without
/// `--endpoint`): the published objects of `driver` and its claims waiting for a node. What
/// only the running provisioner knows (the driver's last answer, its age, reservations) is
/// left unknown.
pub fn from_api<'a>(
    driver: &str,
    objects: impl IntoIterator<Item = &'a k8s_openapi::api::storage::v1::CSIStorageCapacity>,
    waiting_classes: impl IntoIterator<Item = &'a str>,
) -> View {
    let mut rows: Vec<Row> = objects
        .into_iter()
        .filter(|o| o.metadata.deletion_timestamp.is_none())
        .filter_map(|o| {
            let p = crate::published::Published::from_object(o);
            let key = p.key?;
            Some(Row {
                class: key.class,
                segment: crate::segment::display(&key.segment).to_string(),
                capacity: p.capacity,
                maximum_volume_size: p.maximum_volume_size,
                reading: None,
                reserved: 0,
                in_flight: 0,
                seconds_since_success: None,
                consecutive_failures: 0,
                stale: false,
            })
        })
        .collect();
    rows.sort_by(|a, b| (&a.class, &a.segment).cmp(&(&b.class, &b.segment)));
    let mut counts: std::collections::BTreeMap<String, usize> =
        rows.iter().map(|r| (r.class.clone(), 0)).collect();
    for class in waiting_classes {
        *counts.entry(class.to_string()).or_default() += 1;
    }
    View {
        driver: driver.to_string(),
        rows,
        waiting: counts
            .into_iter()
            .map(|(class, claims)| Waiting { class, claims })
            .collect(),
    }
}

/// The class of a claim of `driver` that waits for the scheduler to pick a node (unbound,
/// not deleting, no `selected-node`).
pub fn waiting_class<'a>(
    claim: &'a k8s_openapi::api::core::v1::PersistentVolumeClaim,
    driver: &str,
) -> Option<&'a str> {
    use provisioning::claim::{class_name, is_ours, waits_for_node};
    let ours = is_ours(claim, driver);
    (ours && waits_for_node(claim))
        .then(|| class_name(claim))
        .flatten()
}

#[cfg(test)]
mod api_tests {
    use super::*;
    use k8s_openapi::api::storage::v1::CSIStorageCapacity;

    #[test]
    fn rows_from_objects_and_waiting_claims() {
        let object = |class: &str, node: &str, cap: &str| -> CSIStorageCapacity {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("{class}-{node}")},
                "storageClassName": class,
                "nodeTopology": {"matchLabels": {"n": node}},
                "capacity": cap,
            }))
            .unwrap()
        };
        let objects = [
            object("slow", "a", "1Gi"),
            object("fast", "b", "2Gi"),
            object("fast", "a", "3Gi"),
        ];
        let view = from_api("d", &objects, ["fast", "fast", "other"]);
        let keys: Vec<(&str, &str, Option<i64>)> = view
            .rows
            .iter()
            .map(|r| (r.class.as_str(), r.segment.as_str(), r.capacity))
            .collect();
        assert_eq!(
            keys,
            [
                ("fast", "n=a", Some(3 << 30)),
                ("fast", "n=b", Some(2 << 30)),
                ("slow", "n=a", Some(1 << 30))
            ]
        );
        let waiting: Vec<(&str, usize)> = view
            .waiting
            .iter()
            .map(|w| (w.class.as_str(), w.claims))
            .collect();
        assert_eq!(waiting, [("fast", 2), ("other", 1), ("slow", 0)]);
        assert!(
            view.rows
                .iter()
                .all(|r| r.reading.is_none() && r.seconds_since_success.is_none())
        );
    }
}
